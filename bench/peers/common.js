// bench/peers/common.js: what graphile.js, pgboss.js and a2.js share: the
// command line, the clock, the paced producers and the worker's end rules.
//
// The clock is process.hrtime.bigint() (libuv's uv_hrtime: CLOCK_MONOTONIC
// on Linux), the clock a2_peer.c reads, so a producer's acknowledgement and
// a handler's start in different processes compare directly. With --clock
// realtime (the delayed cell, whose due times are wall-clock epoch ms) a
// handler's start is CLOCK_REALTIME in ns: hrtime plus an offset taken once
// at the edge of a Date.now() millisecond (realNs below).
"use strict";

const fs = require("node:fs");

function args(argv) {
  const mode = argv[2];
  const opt = {};
  for (let i = 3; i < argv.length; i += 2) {
    const k = argv[i];
    const v = argv[i + 1];
    if (!k || !k.startsWith("--") || v === undefined) {
      throw new Error(`bad argument ${k}`);
    }
    opt[k.slice(2)] = v;
  }
  const num = (k, d) => (opt[k] === undefined ? d : Number(opt[k]));
  return {
    mode,
    db: opt.db,
    variant: opt.variant || "defaults",
    out: opt.out,
    expectFile: opt["expect-file"],
    expect: num("expect", -1),
    rate: num("rate", 0),
    seconds: num("seconds", 0),
    drain: num("drain", 5),
    maxSeconds: num("max-seconds", 120),
    max: num("max", 10000),
    count: num("count", 20000),
    producers: num("producers", 1),
    sessions: num("sessions", 64),
    fifo: num("fifo", 0),
    t0Ms: num("t0-ms", 0),
    spreadMs: num("spread-ms", 0),
    untilMs: num("until-ms", 0),
    clock: opt.clock || "monotonic",
  };
}

// The delayed cell's due time of job seq of n (epoch ms), as a2_peer.c's
// due_ms computes it.
const dueMs = (o, seq, n) => o.t0Ms + Math.floor((seq * o.spreadMs) / n);

const monoNs = () => process.hrtime.bigint();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// CLOCK_REALTIME in ns as hrtime + offset: the offset is taken where
// Date.now() (whole ms of the wall clock) ticks over, found by spinning at
// most 5 ms, so it is right to a few microseconds rather than to 1 ms.
let realOffset = null;
function calibrate() {
  const start = Date.now();
  const limit = monoNs() + 5000000n;
  let now = start;
  let h = monoNs();
  while (now === start && h < limit) {
    h = monoNs();
    now = Date.now();
  }
  realOffset = BigInt(now) * 1000000n - h;
}
function realNs() {
  if (realOffset === null) calibrate();
  return monoNs() + realOffset;
}

// Writes "seq ns" for every entry of times (an array of BigInt or undefined).
function writeTimes(path, times) {
  const lines = [];
  for (let i = 0; i < times.length; i++) {
    if (times[i] !== undefined) lines.push(`${i} ${times[i]}`);
  }
  fs.writeFileSync(path, lines.length ? lines.join("\n") + "\n" : "");
}

const PRODUCE_HOLD_MS = 1000;

// Runs `producers` loops that call send(seq) for seq 0, 1, ... at `rate`
// jobs/s in all (0: as fast as they can), for `seconds` or `max` jobs.
// Records the time each send's promise resolved (the commit acknowledged).
async function produce(o, send) {
  const acks = new Array(o.max);
  let next = 0;
  let done = 0;
  let errors = 0;
  const t0 = monoNs();
  const end = t0 + BigInt(Math.round(o.seconds * 1e9));
  async function loop() {
    for (;;) {
      const seq = next++;
      if (seq >= o.max) return;
      if (o.rate > 0) {
        const due = t0 + BigInt(Math.round((seq * 1e9) / o.rate));
        const left = Number(due - monoNs()) / 1e6;
        if (left >= 1) await sleep(left);
      }
      if (monoNs() >= end) return;
      try {
        await send(seq);
        acks[seq] = monoNs();
        done++;
      } catch (e) {
        if (errors++ === 0) console.error(`producer: ${e.message}`);
      }
    }
  }
  const loops = [];
  for (let i = 0; i < o.producers; i++) loops.push(loop());
  await Promise.all(loops);
  const elapsed = Number(monoNs() - t0) / 1e9;
  console.log(
    `produced ${done} errors ${errors} elapsed_s ${elapsed.toFixed(3)} ` +
      `per_s ${(elapsed > 0 ? done / elapsed : 0).toFixed(1)}`,
  );
  if (o.out) writeTimes(o.out, acks);
  // The connections outlive the last job by a second, as an application's
  // pool does (a2_peer.c's PRODUCE_HOLD_MS: closing them all at once slows
  // the pickup of the last jobs).
  await sleep(PRODUCE_HOLD_MS);
  return done;
}

// The worker side: starts[] records each handler's first start by seq.
function makeRecorder(o) {
  const starts = new Array(o.max);
  const clock = o.clock === "realtime" ? realNs : monoNs;
  if (o.clock === "realtime") calibrate();
  else if (o.clock !== "monotonic") throw new Error(`unknown clock ${o.clock}`);
  const rec = {
    starts,
    started: 0,
    first: 0n,
    last: 0n,
    start(seq) {
      const t = clock();
      if (Number.isInteger(seq) && seq >= 0 && seq < o.max && starts[seq] === undefined) {
        starts[seq] = t;
        rec.started++;
      }
      if (rec.first === 0n) rec.first = t;
      rec.last = t;
    },
  };
  return rec;
}

// Resolves with the reason the worker's run ends, by the same rules as
// a2_peer.c: --expect N (or the count in --expect-file once the producer is
// done; "N UNTIL_MS" there also sets --until-ms) handlers started, --drain
// seconds after the count is known (not with --until-ms), at epoch ms
// --until-ms, --seconds after ready (an idle window), or --max-seconds.
async function awaitEnd(o, rec) {
  const t0 = Date.now();
  let expect = o.expect;
  let expectAt = expect >= 0 ? Date.now() : 0;
  for (;;) {
    const now = Date.now();
    if (now - t0 > o.maxSeconds * 1000) return "max-seconds";
    if (o.seconds > 0 && now - t0 >= o.seconds * 1000) return "seconds";
    if (expect < 0 && o.expectFile) {
      try {
        // "N" or "N UNTIL_MS" (the latter sets --until-ms).
        const f = fs.readFileSync(o.expectFile, "utf8").trim().split(/\s+/);
        const n = parseInt(f[0], 10);
        if (Number.isInteger(n) && n >= 0) {
          expect = n;
          expectAt = now;
          const u = Number(f[1]);
          if (f.length > 1 && u > 0) o.untilMs = u;
        }
      } catch (e) {
        // not written yet
      }
    }
    if (expect >= 0 && rec.started >= expect) return "expected";
    if (o.untilMs > 0 && now >= o.untilMs) return "until";
    if (expect >= 0 && o.expectFile && !(o.untilMs > 0) && now - expectAt >= o.drain * 1000) {
      return "drain";
    }
    await sleep(20);
  }
}

function report(o, rec, why, extra) {
  console.log(
    `started ${rec.started} first_ns ${rec.first} last_ns ${rec.last} ${extra || ""}end ${why}`,
  );
  if (o.out) writeTimes(o.out, rec.starts);
}

// The delayed cell's enqueue: calls sendBatch(seqs) for seq 0..n-1 in
// batches of `batch` (in seq order, so in due order), one at a time, and
// writes "seq due_ms" for every job of an acknowledged batch. Prints
// "delayed N elapsed_s T late_s L" (L: how far past the first due time the
// last batch was acknowledged; negative: before).
async function produceDelayed(o, batch, sendBatch) {
  const n = o.count;
  const due = new Array(n);
  let done = 0;
  let errors = 0;
  const t0 = monoNs();
  for (let i = 0; i < n; i += batch) {
    const seqs = [];
    for (let s = i; s < Math.min(n, i + batch); s++) seqs.push(s);
    try {
      await sendBatch(seqs);
      for (const s of seqs) due[s] = dueMs(o, s, n);
      done += seqs.length;
    } catch (e) {
      if (errors++ === 0) console.error(`delayed enqueue: ${e.message}`);
    }
  }
  console.log(
    `delayed ${done} elapsed_s ${(Number(monoNs() - t0) / 1e9).toFixed(3)} ` +
      `late_s ${((Date.now() - o.t0Ms) / 1e3).toFixed(3)}`,
  );
  if (o.out) writeTimes(o.out, due);
  return done;
}

module.exports = {
  args,
  monoNs,
  realNs,
  sleep,
  dueMs,
  produce,
  produceDelayed,
  makeRecorder,
  awaitEnd,
  report,
};
