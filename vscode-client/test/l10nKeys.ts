// The messages the extension's code gives to l10n.t(): read from src/ with the TypeScript
// parser, as @vscode/l10n-dev's extractor would (the key is the first argument, a literal).
import * as ts from "typescript";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";

export interface Use {
  key: string | null; // null: not a literal (cannot be looked up in a bundle)
  where: string; // src/…:line
}

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? sources(p) : p.endsWith(".ts") ? [p] : [];
  });
}

/** Every `l10n.t(...)` (and `vscode.l10n.t(...)`) call under `root`/src. */
export function l10nUses(root: string): Use[] {
  const out: Use[] = [];
  for (const file of sources(join(root, "src"))) {
    const sf = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.ES2022, true);
    const visit = (n: ts.Node): void => {
      if (ts.isCallExpression(n) && ts.isPropertyAccessExpression(n.expression) && n.expression.name.text === "t") {
        const obj = n.expression.expression;
        const isL10n = (ts.isIdentifier(obj) && obj.text === "l10n") || (ts.isPropertyAccessExpression(obj) && obj.name.text === "l10n");
        if (isL10n) {
          const a = n.arguments[0];
          const key = a && (ts.isStringLiteral(a) || ts.isNoSubstitutionTemplateLiteral(a)) ? a.text : null;
          out.push({ key, where: `${relative(root, file)}:${sf.getLineAndCharacterOfPosition(n.getStart()).line + 1}` });
        }
      }
      ts.forEachChild(n, visit);
    };
    visit(sf);
  }
  return out;
}

/** `{0}`, `{name}` placeholders of a message, sorted. */
export function placeholders(message: string): string[] {
  return [...new Set([...message.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]))].sort();
}
