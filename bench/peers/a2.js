// bench/peers/a2.js: a2's enqueue from Node, through the same client the
// peers use (node-postgres), to tell the client's share of the enqueue
// figures apart from the store's.
//
//   node a2.js produce --db URL --rate R --seconds S --max N --producers P [--out FILE]
//
// Each job is one `select a2_append(session => ..., events => ...)`
// (docs/sql.md) of one event {"seq": N} for consumer "bench" (a concurrent
// cursor) in session "s<N % 64>", as a2_peer.c appends them; P at a time on a
// pool of P connections. The call is a named query, prepared once on each
// connection (node-postgres's way to skip parsing and planning a statement
// it sends again, as docs/sql.md advises where no pooler is in between).
"use strict";

const pg = require("pg");
const c = require("./common");

const SESSIONS = 64;
const APPEND = "select a2_append(session => $1, events => $2::jsonb)";

async function main() {
  const o = c.args(process.argv);
  if (!o.db) throw new Error("--db is required");
  if (o.mode !== "produce") throw new Error(`unknown mode ${o.mode}`);
  const pool = new pg.Pool({ connectionString: o.db, max: Math.max(o.producers, 1) });
  pool.on("error", (e) => console.error(`a2.js: pool: ${e.message}`));
  try {
    await c.produce(o, (seq) =>
      pool.query({
        name: "a2-append",
        text: APPEND,
        values: [
          `s${seq % SESSIONS}`,
          JSON.stringify([{ type: "bench.job", payload: { seq }, targets: [{ consumer: "bench" }] }]),
        ],
      }),
    );
  } finally {
    await pool.end();
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(`a2.js: ${e.stack || e}`);
    process.exit(1);
  },
);
