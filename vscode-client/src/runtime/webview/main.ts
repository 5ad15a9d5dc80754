// The memory panel webview's bundle (dist/webview.js): what its inline script calls. The page
// carries the extension's l10n bundle (panelHtml: <script type="application/json" id="l10n-bundle">):
// the picture's captions come out in the same language as the rest of the panel.
import * as l10n from "@vscode/l10n";
import { pictureView } from "./pictureSvg";

const bundle = document.getElementById("l10n-bundle")?.textContent;
if (bundle) l10n.config({ contents: bundle });

(globalThis as unknown as { stridelensPicture: unknown }).stridelensPicture = { pictureView };
