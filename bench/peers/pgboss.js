// bench/peers/pgboss.js: the pg-boss side of bench/peers.
//
//   node pgboss.js migrate --db URL
//   node pgboss.js produce --db URL --rate R --seconds S --max N --producers P --out FILE
//   node pgboss.js bulk --db URL --count N
//   node pgboss.js delay --db URL --count N --t0-ms T --spread-ms S --out FILE
//   node pgboss.js work --db URL --variant defaults|tuned --max N --out FILE
//        [--expect N | --expect-file F] [--drain S] [--seconds S] [--max-seconds S]
//        [--until-ms T] [--clock realtime]
//
// Jobs go to queue "noop" with data {"seq": N}. migrate creates the schema
// (start) and the queue (createQueue, required since pg-boss 10). produce
// sends them one by one with boss.send, P at a time on a pool of P
// connections; bulk inserts them with boss.insert, 1000 per call; delay
// inserts them the same way, job seq i with startAfter (send's option, the
// start_after column; an ISO time ending in Z, as send passes a Date) at
// T + floor(i * S / N) epoch ms (common.js dueMs). work runs
// 4 workers: pg-boss 10 has no per-worker concurrency option (teamSize went
// in 10, localConcurrency came in 11), and each work() call adds one polling
// worker (docs/api/workers.md). Variant "defaults" calls work() with no
// options (batchSize 1, pollingIntervalSeconds 2: one job per worker every 2
// s); "tuned" polls at the smallest interval pg-boss allows (0.5 s) and
// fetches up to 500 jobs per poll, so that 4 workers can take 4000 jobs/s,
// twice the highest rate offered. The handler records the start of each job
// of its batch.
"use strict";

const PgBoss = require("pg-boss");
const c = require("./common");

const WORKERS = 4;
const QUEUE = "noop";
const VARIANTS = {
  defaults: {},
  tuned: { batchSize: 500, pollingIntervalSeconds: 0.5 },
};

async function boss(o, extra) {
  const b = new PgBoss({ connectionString: o.db, ...extra });
  b.on("error", (e) => console.error(`pg-boss: ${e.message}`));
  await b.start();
  return b;
}

async function main() {
  const o = c.args(process.argv);
  if (!o.db) throw new Error("--db is required");
  if (o.mode === "migrate") {
    const b = await boss(o, {});
    await b.createQueue(QUEUE);
    await b.stop({ graceful: false, wait: true, timeout: 1000 });
    return;
  }
  if (o.mode === "produce" || o.mode === "bulk" || o.mode === "delay") {
    const b = await boss(o, { max: Math.max(o.producers, 1) });
    try {
      if (o.mode === "produce") {
        await c.produce(o, (seq) => b.send(QUEUE, { seq }));
      } else if (o.mode === "delay") {
        await c.produceDelayed(o, 1000, (seqs) =>
          b.insert(
            seqs.map((seq) => ({
              name: QUEUE,
              data: { seq },
              startAfter: new Date(c.dueMs(o, seq, o.count)).toISOString(),
            })),
          ),
        );
      } else {
        const t0 = c.monoNs();
        for (let i = 0; i < o.count; i += 1000) {
          const jobs = [];
          for (let s = i; s < Math.min(o.count, i + 1000); s++) {
            jobs.push({ name: QUEUE, data: { seq: s } });
          }
          await b.insert(jobs);
        }
        console.log(`bulk ${o.count} elapsed_s ${(Number(c.monoNs() - t0) / 1e9).toFixed(3)}`);
      }
    } finally {
      await b.stop({ graceful: false, wait: true, timeout: 1000 });
    }
    return;
  }
  if (o.mode !== "work") throw new Error(`unknown mode ${o.mode}`);
  const variant = VARIANTS[o.variant];
  if (!variant) throw new Error(`unknown variant ${o.variant}`);
  const rec = c.makeRecorder(o);
  const b = await boss(o, {});
  let fetches = 0;
  for (let i = 0; i < WORKERS; i++) {
    await b.work(QUEUE, { ...variant }, async (jobs) => {
      fetches++;
      for (const job of jobs) rec.start(job.data && job.data.seq);
    });
  }
  console.log("ready");
  const why = await c.awaitEnd(o, rec);
  c.report(o, rec, why, `batches ${fetches} `);
  await Promise.race([b.stop({ graceful: false, wait: true, timeout: 1000 }), c.sleep(1000)]);
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(`pgboss.js: ${e.stack || e}`);
    process.exit(1);
  },
);
