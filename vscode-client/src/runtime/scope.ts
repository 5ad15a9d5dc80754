// Which lines of a Python file belong to the stopped frame's scope, and which names each of
// those lines binds — text-only (no parser), good enough to place inline facts. Pure, tested.

function indentOf(line: string): number {
  const m = /^[ \t]*/.exec(line)!;
  return m[0].replace(/\t/g, "        ").length;
}

const isCode = (l: string) => l.trim() !== "" && !l.trim().startsWith("#");
const DEF = /^\s*(?:async\s+)?(?:def|class)\s/;

/**
 * [first, last] (0-based, inclusive) of the scope that contains `stopLine`: the body of the
 * innermost `def` around it, or the whole module; plus the nested def/class bodies to skip.
 */
export function scopeOf(lines: string[], stopLine: number, fn?: string): { first: number; last: number; skip: [number, number][] } {
  let first = 0;
  let last = lines.length - 1;
  if (fn && fn !== "<module>" && stopLine < lines.length) {
    let ind = isCode(lines[stopLine]) ? indentOf(lines[stopLine]) : Infinity;
    for (let i = stopLine; i >= 0; i--) {
      if (!isCode(lines[i])) continue;
      const li = indentOf(lines[i]);
      if (li < ind && /^\s*(?:async\s+)?def\s/.test(lines[i])) {
        first = i;
        last = blockEnd(lines, i);
        break;
      }
      ind = Math.min(ind, li);
    }
  }
  // Nested definitions inside the scope have their own locals.
  const skip: [number, number][] = [];
  const base = first === 0 && (!fn || fn === "<module>") ? -1 : indentOf(lines[first]);
  for (let i = first + (base >= 0 ? 1 : 0); i <= last; i++) {
    if (DEF.test(lines[i]) && indentOf(lines[i]) > base) {
      const end = blockEnd(lines, i);
      skip.push([i, end]);
      i = end;
    }
  }
  return { first, last, skip };
}

function blockEnd(lines: string[], header: number): number {
  const ind = indentOf(lines[header]);
  let end = header;
  for (let j = header + 1; j < lines.length; j++) {
    if (!isCode(lines[j])) continue;
    if (indentOf(lines[j]) <= ind) break;
    end = j;
  }
  return end;
}

const NAME = String.raw`[\p{L}_][\p{L}\p{N}_]*`;
const ASSIGN = new RegExp(String.raw`^\s*((?:${NAME}\s*,\s*)*${NAME}\s*,?)\s*(?::[^=]+)?(?:=(?!=)|[-+*/@%|&^]=)`, "u");
const PAREN_ASSIGN = new RegExp(String.raw`^\s*[([]\s*((?:${NAME}\s*,\s*)*${NAME})\s*,?\s*[)\]]\s*=(?!=)`, "u");
const FOR = new RegExp(String.raw`^\s*(?:async\s+)?for\s+\(?\s*((?:${NAME}\s*,\s*)*${NAME})\s*\)?\s+in\b`, "u");
const WITH_AS = new RegExp(String.raw`\bas\s+(${NAME})\s*[:,)]`, "u");

export interface Binding {
  name: string;
  line: number; // 0-based
  character: number; // where the name starts
}

/** The names a line binds: `a = ...`, `q, k, v = ...`, `x += ...`, `for i, x in ...`, `with ... as t:`. */
export function bindingsOf(line: string, lineNo: number): Binding[] {
  const code = line.replace(/#.*$/, "");
  const m = ASSIGN.exec(code) ?? PAREN_ASSIGN.exec(code) ?? FOR.exec(code) ?? WITH_AS.exec(code);
  if (!m) return [];
  const out: Binding[] = [];
  const re = new RegExp(NAME, "gu");
  const from = code.indexOf(m[1], m.index);
  for (const n of m[1].matchAll(re)) {
    if (["for", "in", "async", "as"].includes(n[0])) continue;
    out.push({ name: n[0], line: lineNo, character: from + (n.index ?? 0) });
  }
  return out;
}

/**
 * For every name bound in the scope and the given line window, the line that shows it: the
 * last binding at or before the stop line, else the first one after it.
 */
export function placeBindings(lines: string[], stopLine: number, fn: string | undefined, window: [number, number]): Binding[] {
  const { first, last, skip } = scopeOf(lines, stopLine, fn);
  const lo = Math.max(first, window[0]);
  const hi = Math.min(last, window[1]);
  const chosen = new Map<string, Binding>();
  for (let i = lo; i <= hi; i++) {
    if (skip.some(([a, b]) => i >= a && i <= b)) continue;
    for (const b of bindingsOf(lines[i], i)) {
      const prev = chosen.get(b.name);
      if (!prev || i <= stopLine || prev.line > stopLine) {
        if (prev && prev.line <= stopLine && i > stopLine) continue;
        chosen.set(b.name, b);
      }
    }
  }
  return [...chosen.values()].sort((a, b) => a.line - b.line || a.character - b.character);
}
