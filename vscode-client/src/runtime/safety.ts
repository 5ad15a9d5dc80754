// Which expressions may be evaluated automatically (hover, inline values): side-effect-free
// shapes only — a name, then attributes and literal subscripts. No calls, operators,
// comprehensions, walrus, lambdas, f-strings, dunders. Pure, unit-tested.

const KEYWORDS = new Set([
  "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
  "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in",
  "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
]);

const IDENT = /^[\p{L}_][\p{L}\p{N}_]*/u;
const MAX_LENGTH = 200;

function isName(s: string): boolean {
  const m = IDENT.exec(s);
  return !!m && m[0] === s && !KEYWORDS.has(s) && !(s.startsWith("__") && s.endsWith("__"));
}

/** One subscript item: an int, a slice of ints, None, `...`, or a plain string literal. */
function isLiteralItem(item: string): boolean {
  const s = item.trim();
  if (s === "" ) return false;
  if (s === "None" || s === "...") return true;
  if (/^-?\d+$/.test(s)) return s.length <= 19;
  if (/^'[^'\\\n]*'$/.test(s) || /^"[^"\\\n]*"$/.test(s)) return true;
  if (s.includes(":")) {
    const parts = s.split(":");
    if (parts.length > 3) return false;
    return parts.every((p) => p.trim() === "" || p.trim() === "None" || /^-?\d+$/.test(p.trim()));
  }
  return false;
}

function isLiteralSubscript(inner: string): boolean {
  // Strings may not contain ',' ':' or brackets here: split naively, reject what does not fit.
  if (/[[\](){}]/.test(inner)) return false;
  const items = inner.split(",");
  if (items.length > 1 && items[items.length - 1].trim() === "") items.pop(); // trailing comma
  return items.length > 0 && items.every(isLiteralItem);
}

/** True when `expr` is a name followed by `.attr` and `[literal]` trailers only. */
export function isSafeExpression(expr: string): boolean {
  if (typeof expr !== "string") return false;
  const s = expr.trim();
  if (!s || s.length > MAX_LENGTH || s.includes("\n")) return false;
  const head = IDENT.exec(s);
  if (!head || !isName(head[0])) return false;
  let i = head[0].length;
  while (i < s.length) {
    const c = s[i];
    if (c === ".") {
      const m = IDENT.exec(s.slice(i + 1));
      if (!m || !isName(m[0])) return false;
      i += 1 + m[0].length;
    } else if (c === "[") {
      const close = s.indexOf("]", i);
      if (close < 0) return false;
      if (!isLiteralSubscript(s.slice(i + 1, close))) return false;
      i = close + 1;
    } else {
      return false;
    }
  }
  return true;
}

export interface ExprSpan {
  text: string;
  start: number;
  end: number; // exclusive
}

const isIdentChar = (c: string | undefined) => !!c && /[\p{L}\p{N}_]/u.test(c);

/**
 * The expression a hover at `ch` means, like a debugger's hover: the chain of names,
 * attributes and subscripts ending at the hovered name (or at the subscript the cursor is
 * in). Undefined when the position is not on such an expression or it is not safe.
 */
export function expressionAt(line: string, ch: number): ExprSpan | undefined {
  if (ch < 0 || ch > line.length) return undefined;
  let end: number;
  if (isIdentChar(line[ch])) {
    end = ch;
    while (isIdentChar(line[end])) end++;
  } else {
    // Inside a subscript `x[1:, 0]`: the expression ends at its closing bracket.
    const open = line.lastIndexOf("[", ch);
    const close = line.indexOf("]", ch);
    if (open < 0 || close < 0 || line.slice(open + 1, ch).includes("]") || line.slice(ch, close).includes("[")) return undefined;
    end = close + 1;
  }
  // Walk left over the chain: NAME ( '.' NAME | '[' ... ']' )*
  let start = end;
  let i = end - 1;
  for (;;) {
    if (line[i] === "]") {
      const open = line.lastIndexOf("[", i);
      if (open < 0) return undefined;
      i = open - 1;
      continue;
    }
    if (isIdentChar(line[i])) {
      while (isIdentChar(line[i - 1])) i--;
      start = i;
      if (line[i - 1] === ".") {
        i -= 2;
        continue;
      }
      if (line[i - 1] === "]") {
        i -= 1;
        continue;
      }
      break;
    }
    return undefined;
  }
  // The chain must start with a name, not a number or a closing bracket of a call.
  if (/^\d/.test(line[start] ?? "")) return undefined;
  if (line[start - 1] === "." ) return undefined; // `(x).y`, `1.0.real`: not ours
  const text = line.slice(start, end);
  if (!isSafeExpression(text)) return undefined;
  return { text, start, end };
}
