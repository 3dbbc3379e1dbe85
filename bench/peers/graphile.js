// bench/peers/graphile.js: the Graphile Worker side of bench/peers.
//
//   node graphile.js migrate --db URL
//   node graphile.js produce --db URL --rate R --seconds S --max N --producers P --out FILE
//   node graphile.js bulk --db URL --count N [--fifo 1 --sessions K]
//   node graphile.js delay --db URL --count N --t0-ms T --spread-ms S --out FILE
//   node graphile.js work --db URL --variant defaults|batched --max N --out FILE
//        [--expect N | --expect-file F] [--drain S] [--seconds S] [--max-seconds S]
//        [--until-ms T] [--clock realtime]
//
// Jobs are task "noop" with payload {"seq": N}. produce adds them one by one
// with workerUtils.addJob (the library's enqueue), P at a time on a pool of P
// connections; bulk adds them with workerUtils.addJobs, 1000 per call (with
// --fifo 1, job seq i in the named queue "q<i % K>", whose jobs Graphile
// Worker runs one at a time, in order: its FIFO); delay
// adds them the same way, job seq i with runAt (the run_at column) at
// T + floor(i * S / N) epoch ms (common.js dueMs). work
// runs 4 jobs at once (concurrency 4) with a handler that only records its
// start; variant "batched" adds the batching options of the Graphile Worker
// performance guide (website/docs/performance.md, "Batching"): a local queue
// of concurrency + 1 jobs and completions and failures batched over 25 ms.
"use strict";

const { EventEmitter } = require("node:events");
const pg = require("pg");
const { run, runMigrations, makeWorkerUtils, Logger } = require("graphile-worker");
const c = require("./common");

const CONCURRENCY = 4;
const VARIANTS = {
  defaults: {},
  batched: {
    localQueue: { size: CONCURRENCY + 1 },
    completeJobBatchDelay: 25,
    failJobBatchDelay: 25,
  },
};

// Warnings and errors only, on stderr.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`graphile: ${message}`);
});

async function main() {
  const o = c.args(process.argv);
  if (!o.db) throw new Error("--db is required");
  if (o.mode === "migrate") {
    await runMigrations({ connectionString: o.db, logger });
    return;
  }
  if (o.mode === "produce" || o.mode === "bulk" || o.mode === "delay") {
    const pool = new pg.Pool({ connectionString: o.db, max: Math.max(o.producers, 1) });
    pool.on("error", (e) => console.error(`graphile.js: pool: ${e.message}`));
    pool.on("connect", (client) => client.on("error", (e) => console.error(`graphile.js: ${e.message}`)));
    const utils = await makeWorkerUtils({ pgPool: pool, logger });
    try {
      if (o.mode === "produce") {
        await c.produce(o, (seq) => utils.addJob("noop", { seq }));
      } else if (o.mode === "delay") {
        await c.produceDelayed(o, 1000, (seqs) =>
          utils.addJobs(
            seqs.map((seq) => ({
              identifier: "noop",
              payload: { seq },
              runAt: new Date(c.dueMs(o, seq, o.count)),
            })),
          ),
        );
      } else {
        const t0 = c.monoNs();
        for (let i = 0; i < o.count; i += 1000) {
          const specs = [];
          for (let s = i; s < Math.min(o.count, i + 1000); s++) {
            const spec = { identifier: "noop", payload: { seq: s } };
            if (o.fifo) spec.queueName = `q${s % o.sessions}`;
            specs.push(spec);
          }
          await utils.addJobs(specs);
        }
        console.log(`bulk ${o.count} elapsed_s ${(Number(c.monoNs() - t0) / 1e9).toFixed(3)}`);
      }
    } finally {
      await utils.release();
      await pool.end();
    }
    return;
  }
  if (o.mode !== "work") throw new Error(`unknown mode ${o.mode}`);
  const variant = VARIANTS[o.variant];
  if (!variant) throw new Error(`unknown variant ${o.variant}`);
  const rec = c.makeRecorder(o);
  const events = new EventEmitter();
  const listening = new Promise((resolve) => events.once("pool:listen:success", resolve));
  let jobErrors = 0;
  events.on("job:error", () => jobErrors++);
  const runner = await run({
    connectionString: o.db,
    concurrency: CONCURRENCY,
    noHandleSignals: true,
    logger,
    events,
    taskList: {
      noop: async (payload) => {
        rec.start(payload && payload.seq);
      },
    },
    preset: { worker: variant },
  });
  await listening;
  console.log("ready");
  const why = await c.awaitEnd(o, rec);
  c.report(o, rec, why, `job_errors ${jobErrors} `);
  await Promise.race([runner.stop(), c.sleep(1000)]);
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(`graphile.js: ${e.stack || e}`);
    process.exit(1);
  },
);
