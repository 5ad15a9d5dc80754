import { test } from "node:test";
import assert from "node:assert/strict";
import { ClientLifecycle, ManagedClient } from "../src/lifecycle";

/** A fake LanguageClient: stop() rejects while starting, as vscode-languageclient's does. */
class FakeClient implements ManagedClient {
  state: "initial" | "starting" | "running" | "stopped" = "initial";
  private release: (() => void) | undefined;
  constructor(readonly name: string, readonly log: string[], private readonly manual = false, private readonly fail = false) {}
  start(): Promise<void> {
    this.log.push(`start ${this.name}`);
    this.state = "starting";
    const done = () => {
      if (this.fail) throw new Error(`${this.name} crashed`);
      this.state = "running";
    };
    if (!this.manual) return Promise.resolve().then(done);
    return new Promise<void>((resolve) => (this.release = resolve)).then(done);
  }
  /** Lets a manual start finish. */
  finishStart(): void {
    this.release?.();
  }
  stop(): Promise<void> {
    this.log.push(`stop ${this.name}`);
    if (this.state === "starting") return Promise.reject(new Error("Client is not running and can't be stopped"));
    this.state = "stopped";
    return Promise.resolve();
  }
}

function harness() {
  const log: string[] = [];
  const prepares: { resolve: (c: FakeClient) => void; reject: (e: Error) => void }[] = [];
  const life = new ClientLifecycle<FakeClient>({
    prepare: () => new Promise((resolve, reject) => prepares.push({ resolve, reject })),
    ready: (c) => log.push(`ready ${c.name}`),
    failed: (e, c) => log.push(`failed ${e.message}${c ? ` (${c.name})` : ""}`),
  });
  /** Lets the next pending prepare() answer, then waits until the lifecycle has acted on it. */
  const answer = async (outcome: FakeClient | Error) => {
    await until(() => prepares.length > 0);
    const p = prepares.shift()!;
    if (outcome instanceof Error) p.reject(outcome);
    else p.resolve(outcome);
    await tick();
  };
  return { log, life, answer, pending: () => prepares.length };
}

const tick = () => new Promise<void>((r) => setImmediate(r));
async function until(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 100 && !cond(); i++) await tick();
  assert.ok(cond(), "condition never held");
}

test("an interpreter that cannot run the server makes no client", async () => {
  const { log, life, answer } = harness();
  const started = life.start();
  await answer(new Error("stridelens is not installed in /bare/python"));
  await started;
  assert.equal(life.client, undefined);
  assert.deepEqual(log, ["failed stridelens is not installed in /bare/python"]);
});

test("restart stops the running client before it first awaits", async () => {
  const { log, life, answer } = harness();
  const a = new FakeClient("a", log);
  const started = life.start();
  await answer(a);
  await started;
  assert.equal(life.client, a);
  const restarted = life.restart();
  // Synchronously: a configuration listener that runs right after the one calling restart()
  // must find the old client already stopping (its own listener cleared).
  assert.deepEqual(log, ["start a", "ready a", "stop a"]);
  assert.equal(life.client, undefined);
  const b = new FakeClient("b", log);
  await answer(b);
  await restarted;
  assert.equal(life.client, b);
  assert.deepEqual(log, ["start a", "ready a", "stop a", "start b", "ready b"]);
});

test("fixing the interpreter after a failed check starts the server", async () => {
  const { log, life, answer } = harness();
  const first = life.start();
  await answer(new Error("not installed"));
  await first;
  const restarted = life.restart();
  const good = new FakeClient("good", log);
  await answer(good);
  await restarted;
  assert.equal(life.client, good);
  assert.equal(good.state, "running");
  assert.deepEqual(log, ["failed not installed", "start good", "ready good"]);
});

test("a restart during the interpreter check drops that check's client unstarted and its failure unsaid", async () => {
  const { log, life, answer, pending } = harness();
  void life.start();
  await until(() => pending() === 1);
  const restarted = life.restart();
  const stale = new FakeClient("stale", log);
  await answer(stale); // the superseded check answers
  const fresh = new FakeClient("fresh", log);
  await answer(fresh);
  await restarted;
  assert.equal(stale.state, "initial");
  assert.equal(life.client, fresh);
  assert.deepEqual(log, ["start fresh", "ready fresh"]);

  const { log: log2, life: life2, answer: answer2, pending: pending2 } = harness();
  void life2.start();
  await until(() => pending2() === 1);
  const restarted2 = life2.restart();
  await answer2(new Error("old interpreter not installed"));
  await answer2(new FakeClient("fixed", log2));
  await restarted2;
  assert.deepEqual(log2, ["start fixed", "ready fixed"]);
});

test("a client replaced while starting is stopped once it has started", async () => {
  const { log, life, answer } = harness();
  const slow = new FakeClient("slow", log, true);
  void life.start();
  await answer(slow);
  assert.equal(life.client, slow);
  assert.equal(slow.state, "starting");
  const restarted = life.restart(); // its stop() rejects now: the lifecycle stops it later
  assert.equal(life.client, undefined);
  slow.finishStart();
  const next = new FakeClient("next", log);
  await answer(next);
  await restarted;
  assert.equal(slow.state, "stopped");
  assert.equal(life.client, next);
  assert.deepEqual(log, ["start slow", "stop slow", "stop slow", "start next", "ready next"]);
});

test("a start that fails is reported once and leaves no client", async () => {
  const { log, life, answer } = harness();
  const started = life.start();
  await answer(new FakeClient("broken", log, false, true));
  await started;
  assert.equal(life.client, undefined);
  assert.deepEqual(log, ["start broken", "failed broken crashed (broken)"]);
});

test("starts asked for while one is in progress share it; stop leaves nothing running", async () => {
  const { log, life, answer, pending } = harness();
  const s1 = life.start();
  const s2 = life.start();
  assert.equal(s1, s2);
  const c = new FakeClient("c", log);
  await answer(c);
  await s1;
  assert.equal(pending(), 0);
  await life.stop();
  assert.equal(life.client, undefined);
  assert.equal(c.state, "stopped");
  assert.deepEqual(log, ["start c", "ready c", "stop c"]);
});
