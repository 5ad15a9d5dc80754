// The memory panel webview's bundle (dist/webview.js): what its inline script calls.
import { pictureView } from "./pictureSvg";

(globalThis as unknown as { stridelensPicture: unknown }).stridelensPicture = { pictureView };
