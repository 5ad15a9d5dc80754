// Debug endpoints are loopback unless the user opts in (debugpy runs code for any client). Pure.
import * as l10n from "@vscode/l10n";

const LOOPBACK = new Set(["127.0.0.1", "localhost", "::1", "[::1]"]);

export function isLoopback(host: string): boolean {
  return LOOPBACK.has(host) || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/**
 * The `connect` of an attach configuration as the endpoint of the debugpy adapter the target
 * started (debugpy.listen() / `python -m debugpy --listen`), or why it is not one. The port may
 * be a numeric string: `${input:…}` and `${env:…}` substitute strings. Checked after substitution,
 * so a host from `${input:…}` is judged by what it became: loopback only unless `allowRemote`.
 */
export function connectEndpoint(connect: unknown, allowRemote = false): { host: string; port: number } | { error: string } {
  if (!connect || typeof connect !== "object") return { error: l10n.t('"connect" must be an object: {"host", "port"}') };
  const c = connect as { host?: unknown; port?: unknown };
  const host = c.host === undefined || c.host === null || c.host === "" ? "127.0.0.1" : String(c.host);
  const port = typeof c.port === "string" && /^\s*\d+\s*$/.test(c.port) ? Number(c.port) : c.port;
  if (typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535) {
    return { error: l10n.t('"connect.port" must be a port number (1-65535), not {0}', JSON.stringify(c.port ?? null)) };
  }
  if (!allowRemote && !isLoopback(host)) {
    return { error: l10n.t('{0} is not a loopback address; debugpy runs code for whoever connects. Set "allowRemote": true to attach anyway', host) };
  }
  return { host: host.replace(/^\[(.*)\]$/, "$1"), port };
}
