// The end-to-end scenario in a real VS Code (code-server) in Debian's chromium:
//   1. static hover on `b = a[1:, 1:3]`           2. SL101 quick fix through the lightbulb menu
//   3. fallback debugger: breakpoint, inline runtime facts, runtime hover card, memory panel
//      (a leak with its lines, x's storage picture, on request the gradients of `model` and
//      the memory explained: CPU-only, the RSS)
//   4. a Python without torch/debugpy (symbolic facts, bundled debugpy), then none at all
//   5. attach by host:port to a running process (debugpy.listen): inline facts, the memory
//      panel's storage pictures (a transpose's grid, a row of a big storage as a bar, redrawn
//      for a narrower window)
//   6. a real .ipynb in the notebook editor: a hover in a cell (LSP notebook sync)
//   7. the memory panel's step diff (inspect --diff-steps 3) on a loop with a growing list
//   8. 中文: `"stridelens.locale": "zh-CN"` in the workspace settings (no VS Code language pack
//      is needed): the status bar, a static hover (the server's locale key), inline facts, the
//      runtime hover card and the memory panel in Chinese; English again once the setting goes
// The workspace's interpreter has torch and debugpy but not stridelens: the bundled copy runs.
// Usage: node scenario.mjs URL WORKSPACE ARTIFACTS   (run by e2e/run.sh)
import { chromium } from "playwright-core";
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";

const [url, workspace, artifacts] = process.argv.slice(2);
mkdirSync(artifacts, { recursive: true });
const t0 = Date.now();
const log = (m) => console.log(`[e2e ${((Date.now() - t0) / 1000).toFixed(1)}s] ${m}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const results = [];

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"],
});
const page = await browser.newPage({ viewport: { width: 1500, height: 900 } });
page.setDefaultTimeout(30_000);

async function shot(name, locator) {
  const path = join(artifacts, `${name}.png`);
  try {
    if (locator) await locator.screenshot({ path });
    else await page.screenshot({ path });
  } catch (e) {
    log(`screenshot ${name} failed: ${e.message}`);
  }
  return path;
}

async function step(name, fn) {
  const only = process.env.E2E_STEPS; // development: E2E_STEPS=3 runs step 3 only (and fails the run)
  if (only && !only.split(",").includes(name[0])) return log(`skipped ${name}`);
  const s = Date.now();
  try {
    await fn();
    results.push({ name, ok: true, s: (Date.now() - s) / 1000 });
    log(`PASS ${name}`);
  } catch (e) {
    results.push({ name, ok: false, s: (Date.now() - s) / 1000, error: e.message });
    log(`FAIL ${name}: ${e.stack || e.message}`);
    await shot(`FAIL-${name.replace(/\W+/g, "_")}`);
  }
}

async function until(what, fn, timeout = 30_000, every = 300) {
  const end = Date.now() + timeout;
  let last;
  while (Date.now() < end) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    await sleep(every);
  }
  throw new Error(`timed out waiting for ${what}${last ? ` (${last.message})` : ""}`);
}

async function runCommand(title) {
  await page.keyboard.press("Escape");
  await page.keyboard.press("Control+Shift+P");
  await pick(`>${title}`, title);
}

/** Type `filter` into the open quick input and accept the row labelled exactly `label`. */
async function pick(filter, label, timeout = 10_000) {
  const input = page.locator(".quick-input-widget input").first();
  await input.waitFor({ state: "visible" });
  await input.fill(filter);
  await until(`"${label}" in the quick input`, async () =>
    (await page.locator(".quick-input-list .monaco-list-row", { hasText: label }).count()) > 0, timeout);
  // Several rows may contain the label ("Debug: Disconnect and Suspend"): move to the exact one.
  await until(`"${label}" focused`, async () => {
    const focused = page.locator(".quick-input-list .monaco-list-row.focused .label-name").first();
    const text = ((await focused.count()) ? await focused.innerText() : "").replace(/\s+/g, " ").trim();
    if (text === label) return true;
    await page.keyboard.press("ArrowDown");
    return false;
  }, 5000, 150);
  await page.keyboard.press("Enter");
}

async function openFile(rel) {
  const name = rel.split("/").pop();
  const tab = page.locator(`.tab.active[aria-label*="${name}"], .tab.active:has-text("${name}")`).first();
  for (let attempt = 1; ; attempt++) {
    await page.keyboard.press("Escape");
    await page.keyboard.press("Control+P");
    const input = page.locator(".quick-input-widget input").first();
    await input.waitFor({ state: "visible" });
    await input.fill(rel);
    await until(`${rel} in quick open`, async () =>
      (await page.locator(".quick-input-list .monaco-list-row", { hasText: name }).count()) > 0, 15_000);
    await sleep(200); // the list settles (a file opened before is listed twice: recently opened, then files)
    const focused = page.locator(".quick-input-list .monaco-list-row.focused").first();
    const label = (await focused.count()) ? squash(await focused.innerText()) : "(none)";
    await page.keyboard.press("Enter");
    try {
      await tab.waitFor({ state: "visible", timeout: 10_000 });
      break;
    } catch (e) {
      log(`quick open of ${rel} (focused row: ${label}) opened no tab, attempt ${attempt}`);
      if (attempt === 3) throw e;
    }
  }
  await page.locator(".monaco-editor .view-lines").first().waitFor({ state: "visible" });
}

async function gotoLine(n) {
  await page.keyboard.press("Control+G");
  const input = page.locator(".quick-input-widget input").first();
  await input.waitFor({ state: "visible" });
  await input.fill(`:${n}`);
  await page.keyboard.press("Enter");
  await sleep(200);
}

/** The text of the editor's `after` decorations (CSS ::after content). */
async function inlineDecorations() {
  return page.locator(".editor-instance .view-lines").first().evaluate((root) => {
    const out = [];
    for (const el of root.querySelectorAll("span")) {
      const c = getComputedStyle(el, "::after").content;
      if (c && c !== "none" && c !== "normal" && c.length > 2) out.push(c.replace(/^"|"$/g, ""));
    }
    return out;
  });
}

const TEXT_EDITOR_LINES = ".editor-instance .monaco-editor .view-line";
const NOTEBOOK_CELL_LINES = ".notebook-editor .monaco-editor .view-line >> visible=true"; // (a hidden notebook editor is kept too)

/** Screen position of the `col`-th character (0-based) of the rendered line containing `text`. */
async function charPoint(text, col, lines = TEXT_EDITOR_LINES) {
  const line = page.locator(lines, { hasText: text }).first();
  await line.waitFor({ state: "visible", timeout: 10_000 });
  return line.evaluate((el, col) => {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    let seen = 0;
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const len = n.textContent.length;
      if (seen + len > col) {
        const r = document.createRange();
        r.setStart(n, col - seen);
        r.setEnd(n, col - seen + 1);
        const b = r.getBoundingClientRect();
        return { x: b.left + b.width / 2, y: b.top + b.height / 2 };
      }
      seen += len;
    }
    return null;
  }, col);
}

/** Hover a token (re-located before each try: Monaco re-renders) until the hover matches. */
async function hoverUntil(lineText, col, re, timeout = 45_000, lines = TEXT_EDITOR_LINES) {
  return until(`a hover matching ${re}`, async () => {
    await page.mouse.move(5, 5);
    await sleep(150);
    const p = await charPoint(lineText, col, lines);
    if (!p) return false;
    await page.mouse.move(p.x, p.y);
    const hover = page.locator(".monaco-hover:visible, .monaco-editor-hover:visible").first();
    try {
      await hover.waitFor({ state: "visible", timeout: 2500 });
    } catch {
      return false;
    }
    await sleep(400); // a second provider may still be answering
    const text = await hover.innerText();
    return re.test(text) ? { text, hover } : false;
  }, timeout, 200);
}

/** The status bar's text (the stridelens item: "stridelens · exact", "stridelens error", ...). */
const statusText = async () => (await page.locator(".statusbar").innerText()).replace(/\s+/g, " ");

const squash = (t) => t.replace(/\s+/g, " ").trim();

/** Notification toasts matching `re`, looked at every 200 ms until stop() (a toast can come and go between two looks). */
function watchToasts(re) {
  const seen = new Set();
  let on = true;
  const loop = (async () => {
    while (on) {
      for (const t of await page.locator(".notification-toast", { hasText: re }).allInnerTexts().catch(() => [])) seen.add(squash(t));
      await sleep(200);
    }
  })();
  return { stop: async () => ((on = false), await loop, [...seen]) };
}

/** The messages in the notification center (it keeps those whose toasts have gone). */
async function notificationCenter() {
  await runCommand("Notifications: Show Notifications");
  const center = page.locator(".notifications-center");
  await center.waitFor({ state: "visible", timeout: 5000 });
  await sleep(300);
  const texts = (await center.locator(".notification-list-item-message").allInnerTexts()).map(squash);
  await page.keyboard.press("Escape");
  await center.waitFor({ state: "hidden", timeout: 5000 }).catch(() => log("the notification center did not close on Escape"));
  return texts;
}

/** Whether something accepts TCP connections on 127.0.0.1:port. */
function portOpen(port) {
  return new Promise((resolve) => {
    const sock = connect({ host: "127.0.0.1", port });
    const done = (v) => {
      sock.destroy();
      resolve(v);
    };
    sock.setTimeout(1000, () => done(false));
    sock.once("connect", () => done(true));
    sock.once("error", () => done(false));
  });
}

// Step 5's debuggee, in a process group of its own. Killed at the end of the step, and also
// here when the scenario exits early (an exception, a signal); run.sh kills the group named
// in E2E_TARGET_PIDFILE should node itself be killed.
let target;
const exited = (t) => t.child.exitCode !== null || t.child.signalCode !== null;
function killTargetNow() {
  if (target && !exited(target)) {
    try {
      process.kill(-target.child.pid, "SIGKILL");
    } catch { /* gone */ }
  }
}
process.on("exit", killTargetNow);
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(sig, () => process.exit(128 + (sig === "SIGINT" ? 2 : sig === "SIGTERM" ? 15 : 1)));

function startTarget(python, file) {
  const child = spawn(python, [file], {
    cwd: workspace,
    detached: true, // its own process group: killing it takes anything it started along
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, PYDEVD_DISABLE_FILE_VALIDATION: "1", PYTHONUNBUFFERED: "1" },
  });
  const t = { child, out: "", exited: new Promise((r) => child.once("exit", (code, sig) => r({ code, sig }))) };
  child.stdout.on("data", (d) => (t.out += d));
  child.stderr.on("data", (d) => (t.out += d));
  if (process.env.E2E_TARGET_PIDFILE) writeFileSync(process.env.E2E_TARGET_PIDFILE, String(child.pid));
  target = t;
  return t;
}

/** SIGTERM the target's group, SIGKILL it after 5 s; the log goes to the artifacts. */
async function stopTarget(t) {
  if (!exited(t)) {
    try {
      process.kill(-t.child.pid, "SIGTERM");
    } catch { /* gone */ }
    const exited = await Promise.race([t.exited.then(() => true), sleep(5000).then(() => false)]);
    if (!exited) {
      log("attach target ignored SIGTERM: SIGKILL");
      killTargetNow();
      await Promise.race([t.exited, sleep(5000)]);
    }
  }
  if (process.env.E2E_TARGET_PIDFILE) rmSync(process.env.E2E_TARGET_PIDFILE, { force: true });
  writeFileSync(join(artifacts, "5-attach-target.log"), t.out);
}

/** Step 5's memory panel: the storage pictures of grid_t (a grid) and row (a bar), at two widths. */
async function panelPictures() {
  await runCommand("stridelens: Show tensor memory");
  const frame = await until("the memory panel", async () => {
    for (const f of page.frames()) {
      try {
        if ((await f.locator("#content .tensor", { hasText: /^\s*grid_t:/ }).count()) > 0) return f;
      } catch { /* detached */ }
    }
    return false;
  }, 60_000, 500);
  const webview = page.locator("iframe.webview").last();
  const picture = async (name, kind) => {
    await frame.locator(".tensor", { hasText: new RegExp(`^\\s*${name}:`) }).first().click();
    const svg = frame.locator(`#picture svg.picture[data-kind="${kind}"]`).first();
    await svg.waitFor({ state: "visible", timeout: 15_000 });
    await until(`${name}'s picture caption`, async () => (await frame.locator("#picture-foot").innerText()).length > 0, 5000);
    return svg;
  };
  // grid_t = grid.t() of a (3, 4) grid: rows of its outer stride 4, numbered in the order grid_t reads.
  const grid = await picture("grid_t", "grid");
  const row = await grid.getAttribute("data-row");
  const numbers = (await grid.locator("text").allTextContents()).map((t) => t.trim());
  const head = await frame.locator("#picture-head").innerText();
  log(`grid_t picture: rows of ${row}: ${numbers.join(" ")}; ${head}`);
  if (row !== "4" || numbers.join(" ") !== "0 3 6 9 1 4 7 10 2 5 8 11") throw new Error(`grid_t's grid: rows of ${row}, ${numbers.join(" ")}`);
  if (!/storage 12 × float32 \(48 B\) in rows of 4/.test(head)) throw new Error(`grid_t's grid caption: ${head}`);
  await shot("5-panel-grid", webview);
  // row = big[400] of a (1000, 12800) storage: 50 KiB of 48.8 MiB, a mark at 40% of the bar.
  const bar = await picture("row", "bar");
  const barWidth = async () => Number(await bar.getAttribute("width"));
  const check = async (label) => {
    const w = await barWidth();
    const marks = await bar.locator("rect.pic-used").evaluateAll((rs) => rs.map((r) => [Number(r.getAttribute("x")), Number(r.getAttribute("width"))]));
    const foot = await frame.locator("#picture-foot").innerText();
    const svgText = (await bar.locator("text").allTextContents()).join(" | ");
    log(`row picture (${label}): ${w} px wide, marks ${JSON.stringify(marks)}; ${svgText}; ${foot}`);
    if (marks.length !== 1 || Math.abs(marks[0][0] - 0.4 * w) > w / Math.floor(w / 3) + 0.01) throw new Error(`row's mark is not at 40% of ${w} px: ${JSON.stringify(marks)}`);
    if (!/50\.0 KiB at element 5,120,000/.test(svgText) || !/48\.8 MiB/.test(svgText)) throw new Error(`row's bar labels: ${svgText}`);
    if (!/^reads 50\.0 KiB of 48\.8 MiB \(0\.1%\) from element 5,120,000, strides \(1,\)$/.test(foot)) throw new Error(`row's caption: ${foot}`);
    return w;
  };
  const wide = await check("wide");
  await shot("5-panel-bar", webview);
  // A narrower window: the panel draws the picture again for its new width.
  await page.setViewportSize({ width: 1000, height: 900 });
  await until("the bar redrawn for the narrower panel", async () => (await barWidth()) < wide - 50, 10_000, 300);
  await check("narrow");
  await shot("5-panel-bar-narrow", webview);
  await page.setViewportSize({ width: 1500, height: 900 });
  await until("the bar redrawn for the wider panel", async () => Math.abs((await barWidth()) - wide) < 2, 10_000, 300);
}

try {
  log(`opening ${url}`);
  await page.goto(`${url}/?folder=${encodeURIComponent(workspace)}`);
  await page.locator(".monaco-workbench").waitFor({ state: "visible", timeout: 60_000 });
  await sleep(1000);

  await step("1 static hover on b = a[1:, 1:3]", async () => {
    await openFile("examples/layout_basics.py");
    await until("the stridelens status bar item", async () => /stridelens/.test(await page.locator(".statusbar").innerText()), 30_000);
    // Inlay hints render inside the line (`b: (2, 2) [non-contig] … = a[1:, 1:3]`): match its tail.
    const { text, hover } = await hoverUntil("a[1:, 1:3]  # explain: shape", 0, /\(2, 2\)/);
    log(`hover: ${text.replace(/\s+/g, " ").slice(0, 300)}`);
    for (const re of [/\(2, 2\)/, /\(4, 1\)/, /storage offset\W*5/i, /contiguous\W*no|non-contig/i, /view of\W*`?a`?/i]) {
      if (!re.test(text)) throw new Error(`hover lacks ${re}: ${text}`);
    }
    await shot("1-hover-card", hover);
    await shot("1-hover");
    const status = await page.locator(".statusbar").innerText();
    log(`status bar: ${status.replace(/\s+/g, " ")}`);
  });

  await step("2 SL101 quick fix through the lightbulb menu", async () => {
    await page.mouse.move(5, 5);
    await openFile("examples/view_vs_reshape.py");
    const problems = async () => {
      await page.keyboard.press("Control+Shift+M");
      const panel = page.locator(".markers-panel");
      await panel.waitFor({ state: "visible", timeout: 5000 });
      return panel.innerText();
    };
    await until("the SL101 diagnostic", async () => /SL101/.test(await problems()), 45_000, 1000);
    await shot("2-diagnostic");
    // Put the cursor on `.view(` and open the lightbulb's menu.
    const p = await charPoint("fails = xt.view(-1)", "fails = xt.view(-1)".indexOf("view") + 1);
    await page.mouse.click(p.x, p.y);
    await sleep(300);
    const bulb = page.locator(".lightBulbWidget .codicon, .lightBulbWidget").first();
    let menu = page.locator(".action-widget", { hasText: "SL101" }).first();
    try {
      await bulb.waitFor({ state: "visible", timeout: 8000 });
      await bulb.click();
      await menu.waitFor({ state: "visible", timeout: 5000 });
      log("quick-fix menu opened from the lightbulb");
    } catch {
      log("lightbulb not clickable: opening the same menu with Ctrl+.");
      await page.keyboard.press("Control+.");
      await menu.waitFor({ state: "visible", timeout: 8000 });
    }
    await shot("2-quickfix-menu");
    // Choose the SL101 fix with the keyboard (a pointer block covers the menu in headless chromium).
    await until("the SL101 fix focused in the menu", async () => {
      const label = await page.locator(".action-widget .monaco-list-row.focused").first().getAttribute("aria-label");
      if (label && /reshape/.test(label) && /SL101/.test(label)) return true;
      await page.keyboard.press("ArrowDown");
      return false;
    }, 10_000, 200);
    await page.keyboard.press("Enter");
    await until("the line to change", async () => (await page.locator(".editor-instance .view-line", { hasText: "xt.reshape(-1)  # explain: raises" }).count()) > 0, 10_000);
    await until("SL101 to disappear", async () => !/SL101/.test(await problems()), 30_000, 1000);
    await shot("2-fixed");
    await page.keyboard.press("Control+S");
  });

  await step("3 debug: breakpoint, inline facts, runtime hover, memory panel", async () => {
    await runCommand("View: Hide Panel").catch(() => page.keyboard.press("Escape")); // room for the editor
    await openFile("examples/runtime/leaky_losses.py");
    await gotoLine(26);
    await runCommand("Debug: Toggle Breakpoint");
    await until("the breakpoint", async () => (await page.locator(".codicon-debug-breakpoint").count()) > 0, 5000);
    await runCommand("stridelens: Debug current file (debugpy)");
    log("debug session starting");
    await until("the debuggee to stop", async () => (await page.locator(".codicon-debug-stackframe").count()) > 0, 90_000, 500);
    log("stopped at the breakpoint");
    try {
      await gotoLine(12);
      const inline = await until("inline runtime facts", async () => {
        const t = (await inlineDecorations()).join("\n");
        return /x: \(128, 256\) · float32 · cpu · strides \(256, 1\) · offset 0 · contiguous/.test(t) && /losses: 20 tensors/.test(t) ? t : false;
      }, 60_000, 500);
      log(`inline: ${inline.split("\n").join(" | ").slice(0, 400)}`);
      await shot("3-inline-facts");
      const line = "= torch.randn(128, 256)";
      const { text, hover } = await hoverUntil(line, 4, /stridelens · runtime/);
      for (const re of [/\(128, 256\)/, /float32/, /\(256, 1\)/]) if (!re.test(text)) throw new Error(`runtime card lacks ${re}: ${text}`);
      await shot("3-runtime-hover-card", hover);
      await shot("3-runtime-hover");
      await page.mouse.move(5, 5);
      await runCommand("stridelens: Show tensor memory");
      const frame = await until("the memory panel", async () => {
        for (const f of page.frames()) {
          try {
            if ((await f.locator("#content .finding").count()) > 0) return f;
          } catch { /* detached */ }
        }
        return false;
      }, 60_000, 500);
      const finding = frame.locator(".finding", { hasText: "losses" }).first();
      await finding.waitFor({ state: "visible", timeout: 10_000 });
      const ftext = await finding.innerText();
      log(`leak: ${ftext.replace(/\s+/g, " ")}`);
      if (!/keeps 20 autograd graphs alive/.test(ftext)) throw new Error(`unexpected finding: ${ftext}`);
      if (!/line 12/.test(ftext) || !/line 21/.test(ftext)) throw new Error(`finding lacks the source lines 12 and 21: ${ftext}`);
      await frame.locator(".tensor", { hasText: /^\s*x:/ }).first().click();
      // x = torch.randn(128, 256) reads its whole storage: the bar is one solid run.
      const pic = frame.locator("#picture svg.picture").first();
      await pic.waitFor({ state: "visible", timeout: 15_000 });
      const xfoot = await frame.locator("#picture-foot").innerText();
      log(`x picture: ${await pic.getAttribute("data-kind")}; ${xfoot}`);
      if ((await pic.getAttribute("data-kind")) !== "bar" || !/^reads 128\.0 KiB of 128\.0 KiB .* from element 0, strides \(256, 1\)$/.test(xfoot)) {
        throw new Error(`x's picture: ${await pic.getAttribute("data-kind")}, ${xfoot}`);
      }
      if ((await pic.locator("rect.pic-used").count()) !== 1) throw new Error("x's bar is not one solid run");
      await shot("3-memory-panel");
      // Gradients on request (they read values): model's four parameters after backward, as inspect --grads.
      await frame.locator("#read-grads").click();
      const grads = frame.locator("#grads table.grads");
      await grads.waitFor({ state: "visible", timeout: 60_000 }).catch(async (e) => {
        throw new Error(`${e.message}; the section says: ${await frame.locator("#grads").innerText()}`);
      });
      const gradRows = (await grads.locator("tr.grad-row").allInnerTexts()).map(squash);
      const gsummary = squash(await frame.locator("#grads").innerText());
      log(`gradients: ${gradRows.join(" | ")}; ${gsummary.slice(-200)}`);
      const gnames = gradRows.map((r) => r.split(" ")[1]);
      if (gnames.join(" ") !== "model.0.weight model.0.bias model.2.weight model.2.bias") throw new Error(`gradient rows: ${gradRows.join(" | ")}`);
      if (!gradRows.every((r) => /\bok$/.test(r) && /\(\d+(, \d+)?,?\)\s+[\d.e+-]+\s+[\d.e+-]+\s+0\s+0\s+[\d.]+%/.test(r))) throw new Error(`gradient rows not all finite and ok: ${gradRows.join(" | ")}`);
      if (!/4 parameters in 2 layers of 1 module \(model\); 0 frozen/.test(gsummary)) throw new Error(`gradient summary: ${gsummary}`);
      // Memory explained (inspect --cuda-summary): a CPU-only torch here, so it says so and gives the RSS.
      await frame.locator("#read-cuda").click();
      const cproc = frame.locator("#cuda .cuda-process");
      await cproc.waitFor({ state: "visible", timeout: 60_000 }).catch(async (e) => {
        throw new Error(`${e.message}; the section says: ${await frame.locator("#cuda").innerText()}`);
      });
      const ctext = squash(await frame.locator("#cuda").innerText());
      log(`memory explained: ${ctext}`);
      if (!/^No CUDA numbers: torch \S+ is built without CUDA: a CPU-only target\. process RSS [\d.]+ MiB \([\d,]+ B\) .* live CPU tensors hold 8\.5 MiB \([\d,]+ B\), [\d.]+% of it$/.test(ctext)) throw new Error(`memory explained: ${ctext}`);
      await frame.locator("#grads").scrollIntoViewIfNeeded();
      await shot("3-memory-panel-grads", page.locator("iframe.webview").last());
      await frame.locator("#title").scrollIntoViewIfNeeded();
      // The panel's top part (leak, devices, selected tensor strip) for the README.
      const box = await page.locator("iframe.webview").first().boundingBox();
      if (box) await page.screenshot({ path: join(artifacts, "3-memory-panel-clip.png"), clip: { x: box.x, y: box.y, width: box.width, height: Math.min(box.height, 560) } });
      await frame.locator("a.src").first().click();
      await sleep(500);
    } finally {
      // also when a check failed: a session left stopped would hold up the later steps
      await runCommand("Debug: Stop").catch(() => undefined);
    }
  });

  await step("4 a Python without torch or debugpy: symbolic facts, the status bar says so, the bundled debugpy; a missing Python: one notification; recovery", async () => {
    // The bundled stridelens serves any Python 3.10+: point the workspace at a bare venv (no
    // torch, no debugpy, no stridelens), then at a path where there is no Python.
    const bare = process.env.E2E_BARE_PYTHON;
    const missing = process.env.E2E_MISSING_PYTHON;
    if (!bare || !missing) throw new Error("E2E_BARE_PYTHON / E2E_MISSING_PYTHON not set by run.sh");
    await runCommand("View: Close All Editor Groups"); // step 3's memory panel holds the second group
    await openFile("examples/view_vs_reshape.py");
    const earlier = await notificationCenter();
    if (earlier.length) log(`notifications before the step (cleared): ${earlier.join(" | ").slice(0, 400)}`);
    await runCommand("Notifications: Clear All Notifications");
    // vscode-languageclient's own errors ("Sending notification workspace/didChangeConfiguration
    // failed", "Request textDocument/inlayHint failed", ...) must not reach the user: only ours.
    const failures = watchToasts(/failed/i);
    const settings = join(workspace, ".vscode", "settings.json");
    const before = readFileSync(settings, "utf8");
    writeFileSync(settings, JSON.stringify({ "stridelens.interpreter": bare }));
    try {
      // (a) No torch: the server runs on the bundled stridelens with symbolic facts only, and the status bar says what is missing.
      const noTorch = "stridelens: no torch in bare, symbolic facts only";
      await until(`the status bar "${noTorch}"`, async () => (await statusText()).includes(noTorch), 60_000, 500);
      log(`status bar: ${await statusText()}`);
      // `xt = x.transpose(0, 1)` of `x = torch.randn(2, 3, 4)`: the symbolic pass folds the literal sizes.
      const { text, hover } = await hoverUntil("x.transpose(0, 1)  # explain: non-contiguous", 0, /\(3, 2, 4\)/);
      log(`hover without torch: ${squash(text).slice(0, 300)}`);
      for (const re of [/\(4, 12, 1\)/, /contiguous\W*no|non-contig/i, /view of\W*`?x`?/i, /symbolic facts only/]) if (!re.test(text)) throw new Error(`symbolic hover lacks ${re}: ${text}`);
      await shot("4-no-torch-hover-card", hover);
      await page.mouse.move(5, 5);
      await shot("4-no-torch-status", page.locator(".statusbar"));
      await shot("4-no-torch");
      // That Python has no debugpy: the fallback debugger runs the bundled one.
      await openFile("plain_target.py");
      await gotoLine(5);
      await runCommand("Debug: Toggle Breakpoint");
      await runCommand("stridelens: Debug current file (debugpy)");
      await until("plain_target.py to stop (bundled debugpy)", async () => (await page.locator(".codicon-debug-stackframe").count()) > 0, 60_000, 500);
      log("stopped in plain_target.py under the bundled debugpy");
      await shot("4-bundled-debugpy");
      await runCommand("Debug: Stop");
      await until("the debug session to end", async () => (await page.locator(".codicon-debug-stackframe").count()) === 0, 20_000, 500);
      // (b) No Python at all: one notification that says so and offers to set another.
      writeFileSync(settings, JSON.stringify({ "stridelens.interpreter": missing }));
      const toast = page.locator(".notification-toast", { hasText: "no Python interpreter at" }).first();
      await toast.waitFor({ state: "visible", timeout: 30_000 });
      const ttext = await toast.innerText();
      log(`notification: ${squash(ttext).slice(0, 300)}`);
      if (!ttext.includes(missing)) throw new Error(`the notification does not name ${missing}: ${ttext}`);
      if (!/Set stridelens\.interpreter/.test(ttext)) throw new Error(`the notification offers no other interpreter: ${ttext}`);
      if (/pip install/.test(ttext)) throw new Error(`the notification still offers a pip install: ${ttext}`);
      await until("the status bar error", async () => /stridelens error/.test(await statusText()), 10_000);
      await sleep(700); // the toast slides in
      await shot("4-no-python-notification", toast);
      await shot("4-no-python");
    } finally {
      writeFileSync(settings, before);
    }
    // Fixing the setting restarts the server on the venv's Python.
    await until("the language server ready again", async () => {
      const s = await statusText();
      return /stridelens/.test(s) && !/stridelens (error|starting|stopped)|no torch/.test(s);
    }, 60_000, 500);
    await sleep(1500); // room for a late error
    const toasts = await failures.stop();
    const center = await notificationCenter();
    log(`notifications: ${center.join(" | ").slice(0, 400)}`);
    if (toasts.length) throw new Error(`"failed" toasts: ${toasts.join(" | ")}`);
    const failed = center.filter((t) => /failed/i.test(t));
    if (failed.length) throw new Error(`"failed" notifications: ${failed.join(" | ")}`);
    const ours = center.filter((t) => /stridelens/.test(t));
    if (ours.length !== 1 || !/no Python interpreter at/.test(ours[0])) throw new Error(`expected one "no Python interpreter" notification, got ${ours.length}: ${center.join(" | ")}`);
    await shot("4-recovered");
    await runCommand("Notifications: Clear All Notifications");
  });

  await step("5 attach by host:port to a running process: inline facts, disconnect leaves it running", async () => {
    const python = process.env.E2E_PYTHON;
    if (!python) throw new Error("E2E_PYTHON not set by run.sh");
    await page.mouse.move(5, 5);
    const rel = "attach_target.py"; // copied into the workspace by run.sh
    const file = join(workspace, rel);
    await openFile(rel);
    // The runtime probe's source comes from the server's interpreter: after step 4 it must be
    // the venv's again (fixing the setting restarts the server).
    await until("the language server ready on the venv's Python", async () => {
      const s = await statusText();
      return /stridelens/.test(s) && !/stridelens (error|starting|stopped)/.test(s);
    }, 60_000, 500);
    const t = startTarget(python, file);
    let port;
    try {
      const m = await until("the target to listen", async () => exited(t) || /^LISTENING (\S+) (\d+)$/m.exec(t.out), 60_000, 200)
        .catch((e) => {
          throw new Error(`${e.message}; target output: ${t.out.slice(-800)}`);
        });
      if (m === true) throw new Error(`the target exited (${t.child.exitCode ?? t.child.signalCode}): ${t.out.slice(-800)}`);
      if (m[1] !== "127.0.0.1") throw new Error(`the target listens on ${m[1]}, not loopback`);
      port = Number(m[2]);
      log(`target pid ${t.child.pid} listening on 127.0.0.1:${port}`);
      const name = "e2e: attach to the running target";
      writeFileSync(join(workspace, ".vscode", "launch.json"), JSON.stringify({
        version: "0.2.0",
        configurations: [{ type: "stridelens", request: "attach", name, connect: { host: "127.0.0.1", port } }],
      }, null, 2));
      await until("the attach configuration to be offered", async () => {
        await page.keyboard.press("Escape");
        await runCommand("Debug: Select and Start Debugging");
        try {
          await pick(`debug ${name}`, name, 3000); // the picker is the "debug " quick access; launch.json may not be read yet
          return true;
        } catch {
          return false;
        }
      }, 30_000, 1000);
      log("attaching");
      await until("the attached process to stop", async () => exited(t) || (await page.locator(".codicon-debug-stackframe").count()) > 0, 60_000, 500);
      if (exited(t)) throw new Error(`the target exited (${t.child.exitCode ?? t.child.signalCode}): ${t.out.slice(-800)}`);
      log("stopped at debugpy.breakpoint()");
      const inline = await until("inline runtime facts of the attached process", async () => {
        const s = (await inlineDecorations()).join("\n");
        return /grid_t: \(4, 3\) · float32 · cpu · strides \(1, 4\) · offset 0 · non-contiguous · view of grid/.test(s) &&
          /window: \(2, 2\) · float32 · cpu · strides \(4, 1\) · offset 5 · non-contiguous · view of grid/.test(s) &&
          /grid: \(3, 4\) · float32 · cpu · strides \(4, 1\) · offset 0 · contiguous/.test(s) ? s : false;
      }, 60_000, 500);
      log(`inline: ${inline.split("\n").join(" | ").slice(0, 400)}`);
      await shot("5-attach-inline-facts");
      const { text, hover } = await hoverUntil("= grid.t()", 6, /stridelens · runtime/);
      for (const re of [/\(4, 3\)/, /\(1, 4\)/, /non-contiguous/]) if (!re.test(text)) throw new Error(`runtime card lacks ${re}: ${text}`);
      // The runtime card (first in the hover, above the static one headed `grid_t — tensor`) has its own storage picture.
      const runtimePart = text.split(/grid_t\s+—\s+tensor/)[0];
      if (!/in rows of 4[\s\S]*0 {2}3 {2}6 {2}9/.test(runtimePart)) throw new Error(`the runtime card has no storage picture: ${runtimePart}`);
      // (the card's top: its picture lies below the hover's fold; the text check above reads it)
      await shot("5-attach-runtime-hover-card", hover);
      await page.mouse.move(5, 5);
      await panelPictures();
      await runCommand("View: Focus First Editor Group"); // the editor again (the panel had the focus)
      await runCommand("Debug: Disconnect");
      log("disconnected");
      await until("the target to run on after the disconnect", async () => /^RESUMED \(1, 4\) 5$/m.test(t.out), 20_000, 200);
      await until("the debug session to end and the facts to go", async () =>
        (await page.locator(".codicon-debug-stackframe").count()) === 0 && !(await inlineDecorations()).some((d) => /grid_t:/.test(d)), 20_000, 500);
      await sleep(1000);
      if (exited(t)) {
        throw new Error(`disconnecting ended the target (exit ${t.child.exitCode ?? t.child.signalCode}): ${t.out.slice(-800)}`);
      }
      log(`target ${t.child.pid} still running after the disconnect`);
      await shot("5-attach-disconnected");
    } finally {
      await stopTarget(t);
    }
    log(`target stopped (${t.child.exitCode ?? t.child.signalCode})`);
    // debugpy.listen() started an adapter in a session of its own: it goes when its debuggee does.
    if (port) await until("debugpy's adapter to close its port", async () => !(await portOpen(port)), 15_000, 500);
  });

  await step("6 notebook: a hover in a cell of a real .ipynb (LSP notebook sync)", async () => {
    await runCommand("View: Close All Editor Groups");
    await openFile("examples/notebook_tensors.ipynb"); // the built-in ipynb serializer: the notebook editor, no kernel needed
    await until("the notebook's cells", async () => (await page.locator(NOTEBOOK_CELL_LINES, { hasText: "a.t()  # a view" }).count()) > 0, 30_000);
    // `t = a.t()` in the third cell, `a = torch.arange(12.).reshape(3, 4)` above it in the same cell.
    const { text, hover } = await hoverUntil("a.t()  # a view", 0, /\(4, 3\)/, 90_000, NOTEBOOK_CELL_LINES);
    log(`notebook hover: ${squash(text).slice(0, 400)}`);
    for (const re of [/\(1, 4\)/, /contiguous\W*no|non-contig/i, /view of\W*`?a`?/i, /in rows of 4/, /0 {2}3 {2}6 {2}9/]) {
      if (!re.test(text)) throw new Error(`notebook hover lacks ${re}: ${text}`);
    }
    await shot("6-notebook-hover-card", hover);
    await shot("6-notebook-hover");
  });

  await step("7 step diff in the memory panel: the growing list is linear, the refilled cache is not", async () => {
    await runCommand("View: Close All Editor Groups");
    await openFile("steps_target.py"); // copied into the workspace by run.sh
    await gotoLine(10);
    await runCommand("Debug: Toggle Breakpoint");
    await runCommand("stridelens: Debug current file (debugpy)");
    await until("steps_target.py to stop", async () => (await page.locator(".codicon-debug-stackframe").count()) > 0, 90_000, 500);
    await page.mouse.move(5, 5);
    await runCommand("stridelens: Show tensor memory");
    const frame = await until("the memory panel of steps_target.py", async () => {
      for (const f of page.frames()) {
        try {
          if ((await f.locator("#run-diff").count()) > 0 && /steps_target\.py:10/.test(await f.locator("#title").innerText())) return f;
        } catch { /* detached */ }
      }
      return false;
    }, 60_000, 500);
    await frame.locator("#diff-n").fill("3");
    await frame.locator("#run-diff").click();
    const table = frame.locator("#diff table.diff");
    await table.waitFor({ state: "visible", timeout: 150_000 }).catch(async (e) => {
      throw new Error(`${e.message}; the section says: ${await frame.locator("#diff").innerText().catch(() => "?")}`);
    });
    const head = squash(await frame.locator("#diff .diff-head").innerText());
    const rows = (await table.locator("tr.diff-row").allInnerTexts()).map(squash);
    log(`step diff: ${head} | ${rows.join(" | ")}`);
    if (!/^Step diff over 3 steps \(the breakpoint hit 3 more times\)/.test(head)) throw new Error(`step diff head: ${head}`);
    const history = rows.find((r) => r.startsWith("history "));
    const cache = rows.find((r) => r.startsWith("cache "));
    if (!history || !/^history container 3 \(24\.0 KiB\) .* \+8\.0 KiB linear$/.test(history)) throw new Error(`history's row: ${history}`);
    if (!cache || /linear$/.test(cache)) throw new Error(`cache's row: ${cache}`);
    const notes = squash(await frame.locator("#diff").innerText());
    if (!/history: a leak: 8\.0 KiB more every step/.test(notes)) throw new Error(`step diff notes: ${notes}`);
    await shot("7-step-diff", page.locator("iframe.webview").last());
    await runCommand("View: Focus First Editor Group");
    await runCommand("Debug: Stop");
    await until("the debug session to end", async () => (await page.locator(".codicon-debug-stackframe").count()) === 0, 20_000, 500);
  });
  await step("8 zh-CN: stridelens.locale in the workspace settings: status bar, static hover, inline facts, runtime hover card and memory panel in Chinese", async () => {
    await runCommand("View: Close All Editor Groups"); // step 7's memory panel
    const settings = join(workspace, ".vscode", "settings.json");
    const before = readFileSync(settings, "utf8");
    writeFileSync(settings, JSON.stringify({ ...JSON.parse(before), "stridelens.locale": "zh-CN" }));
    try {
      // The extension's own words (l10n bundle): the status bar says 精确 / 静态 instead of exact / static.
      await until("the status bar in Chinese", async () => /stridelens · (精确|静态)/.test(await statusText()), 30_000, 300);
      log(`status bar: ${await statusText()}`);
      // The server's words (its `locale` key, from workspace/configuration): the static hover card.
      await openFile("examples/layout_basics.py");
      const { text, hover } = await hoverUntil("a[1:, 1:3]  # explain: shape", 0, /视图/, 45_000);
      log(`zh hover: ${squash(text).slice(0, 300)}`);
      for (const re of [/\(2, 2\)/, /\(4, 1\)/, /存储偏移\W*5/, /步长/, /非连续/]) if (!re.test(text)) throw new Error(`the Chinese hover lacks ${re}: ${text}`);
      await shot("8-zh-hover-card", hover);
      await shot("8-zh-hover");
      await page.mouse.move(5, 5);
      // At a breakpoint: the runtime side in Chinese.
      await openFile("examples/runtime/leaky_losses.py");
      await gotoLine(26);
      if ((await page.locator(".editor-instance .codicon-debug-breakpoint").count()) === 0) await runCommand("Debug: Toggle Breakpoint"); // (step 3 set it)
      await runCommand("stridelens: Debug current file (debugpy)");
      await until("the debuggee to stop", async () => (await page.locator(".codicon-debug-stackframe").count()) > 0, 90_000, 500);
      try {
        await gotoLine(12);
        const inline = await until("inline runtime facts in Chinese", async () => {
          const t = (await inlineDecorations()).join("\n");
          return /x: \(128, 256\) · float32 · cpu · 步长 \(256, 1\) · 偏移 0 · 连续/.test(t) && /losses: 20 个张量/.test(t) ? t : false;
        }, 60_000, 500);
        log(`zh inline: ${inline.split("\n").join(" | ").slice(0, 300)}`);
        const card = await hoverUntil("= torch.randn(128, 256)", 4, /stridelens · 运行时/);
        for (const re of [/形状\s+\(128, 256\)/, /步长\s+\(256, 1\)/, /存储偏移\s+0/, /存储\s+128\.0 KiB/, /读取 128\.0 KiB 中的 128\.0 KiB/]) {
          if (!re.test(card.text)) throw new Error(`the Chinese runtime card lacks ${re}: ${card.text}`);
        }
        await shot("8-zh-runtime-hover-card", card.hover);
        await page.mouse.move(5, 5);
        await runCommand("stridelens: Show tensor memory"); // (command titles follow VS Code's display language: English here)
        const frame = await until("the memory panel in Chinese", async () => {
          for (const f of page.frames()) {
            try {
              if ((await f.locator("#content .finding").count()) > 0 && /张量内存/.test(await f.locator("#title").innerText())) return f;
            } catch { /* detached */ }
          }
          return false;
        }, 60_000, 500);
        const content = squash(await frame.locator("#content").innerText());
        log(`zh panel: ${squash(await frame.locator("#title").innerText())}; ${squash(await frame.locator("#status").innerText())}; ${content.slice(0, 300)}`);
        for (const w of ["泄漏", "按设备", "最大的存储", "当前帧的张量（按存储分组）", "读取梯度", "解释内存", "第 12 行"]) if (!content.includes(w)) throw new Error(`the Chinese panel lacks ${w}: ${content}`);
        if (!/\d+ 个存活张量，位于 \d+ 个存储中/.test(await frame.locator("#status").innerText())) throw new Error(`the panel's status line: ${await frame.locator("#status").innerText()}`);
        // The probe's finding (English in the debuggee), shown in Chinese as `inspect` shows it (launch.py --from-target).
        const finding = squash(await frame.locator(".finding", { hasText: "losses" }).first().innerText());
        if (!/计算图/.test(finding) || /autograd graphs alive/.test(finding)) throw new Error(`the leak finding is not in Chinese: ${finding}`);
        await shot("8-zh-memory-panel", page.locator("iframe.webview").last());
        await frame.locator(".tensor", { hasText: /^\s*x:/ }).first().click();
        await frame.locator("#picture svg.picture").first().waitFor({ state: "visible", timeout: 15_000 });
        const foot = await frame.locator("#picture-foot").innerText();
        const svgText = (await frame.locator("#picture svg.picture text").allTextContents()).join(" | ");
        log(`zh picture: ${foot}; ${svgText}`);
        if (!/^读取 128\.0 KiB 中的 128\.0 KiB \(100%\)，起始元素 0，步长 \(256, 1\)$/.test(foot)) throw new Error(`x's picture caption: ${foot}`);
        if (!/128\.0 KiB，起始元素 0/.test(svgText)) throw new Error(`x's bar labels: ${svgText}`);
        if (!/步长 \(256, 1\) · 偏移 0 · 连续/.test(await frame.locator("#detail").innerText())) throw new Error(`x's detail: ${await frame.locator("#detail").innerText()}`);
        await shot("8-zh-memory-panel-picture", page.locator("iframe.webview").last());
        // Memory explained: the analysis (launch.py --analyze, STRIDELENS_LANG) and the panel's own words in Chinese.
        await frame.locator("#read-cuda").click();
        await frame.locator("#cuda .cuda-process").waitFor({ state: "visible", timeout: 60_000 }).catch(async (e) => {
          throw new Error(`${e.message}; the section says: ${await frame.locator("#cuda").innerText()}`);
        });
        const ctext = squash(await frame.locator("#cuda").innerText());
        log(`zh memory explained: ${ctext.slice(0, 300)}`);
        if (!/^没有 CUDA 数据：.*进程 RSS [\d.]+ MiB .*存活的 CPU 张量占用 8\.5 MiB/.test(ctext) || /built without CUDA/.test(ctext)) throw new Error(`memory explained in Chinese: ${ctext}`);
        await shot("8-zh-memory-panel-window");
      } finally {
        await runCommand("View: Focus First Editor Group").catch(() => undefined);
        await runCommand("Debug: Stop").catch(() => undefined);
      }
      await until("the debug session to end", async () => (await page.locator(".codicon-debug-stackframe").count()) === 0, 20_000, 500);
    } finally {
      writeFileSync(settings, before);
    }
    // The setting gone ("auto", VS Code's display language: English here): English again.
    await until("the status bar in English again", async () => /stridelens · (exact|static)/.test(await statusText()), 30_000, 300);
    await openFile("examples/layout_basics.py");
    const { text } = await hoverUntil("a[1:, 1:3]  # explain: shape", 0, /view of/i, 45_000);
    if (/视图|步长/.test(text)) throw new Error(`the hover is still Chinese: ${text}`);
  });
} finally {
  try {
    await page.goto("about:blank");
  } catch { /* already gone */ }
  await browser.close();
}
const failed = results.filter((r) => !r.ok);
log(`${results.length - failed.length}/${results.length} steps passed in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
for (const r of results) console.log(`  ${r.ok ? "ok  " : "FAIL"} ${r.name} (${r.s.toFixed(1)} s)${r.ok ? "" : ` — ${r.error}`}`);
process.exit(failed.length || results.length < 8 ? 1 : 0);
