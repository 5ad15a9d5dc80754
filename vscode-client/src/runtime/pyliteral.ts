// debugpy answers `evaluate` with the value's repr unless rawString took effect: undo a
// Python string literal ('...' or "..."). Pure, unit-tested.

export function unquotePythonRepr(s: string): string {
  const q = s[0];
  if (s.length < 2 || (q !== "'" && q !== '"') || s[s.length - 1] !== q) return s;
  const body = s.slice(1, -1);
  let out = "";
  for (let i = 0; i < body.length; i++) {
    const c = body[i];
    if (c !== "\\") {
      out += c;
      continue;
    }
    const n = body[++i];
    switch (n) {
      case "n": out += "\n"; break;
      case "t": out += "\t"; break;
      case "r": out += "\r"; break;
      case "0": out += "\0"; break;
      case "\\": out += "\\"; break;
      case "'": out += "'"; break;
      case '"': out += '"'; break;
      case "x": out += String.fromCodePoint(parseInt(body.slice(i + 1, i + 3), 16)); i += 2; break;
      case "u": out += String.fromCodePoint(parseInt(body.slice(i + 1, i + 5), 16)); i += 4; break;
      case "U": out += String.fromCodePoint(parseInt(body.slice(i + 1, i + 9), 16)); i += 8; break;
      default: out += "\\" + (n ?? "");
    }
  }
  return out;
}

/** A probe answer: `{"ok": true, "result": …}` or `{"ok": false, "error": "…"}`. */
export function parseProbeAnswer<T>(raw: string): { ok: true; result: T } | { ok: false; error: string } {
  let text = raw.trim();
  if (text[0] === "'" || text[0] === '"') text = unquotePythonRepr(text);
  try {
    const v = JSON.parse(text);
    if (v && v.ok === true) return { ok: true, result: v.result as T };
    if (v && v.ok === false) return { ok: false, error: String(v.error ?? "probe failed") };
  } catch {
    /* fall through */
  }
  return { ok: false, error: `the probe did not answer as expected: ${raw.slice(0, 300)}` };
}

/** A JS string as a Python string literal (JSON's escapes are all valid Python). */
export function pythonString(s: string): string {
  return JSON.stringify(s);
}
