// peer.js: npm redlock 4.2 over N servers, for bench/redlock/compare.sh.
//   PORTS    the servers, comma-separated (its quorum over all of them)
//   WORKERS  concurrent workers (each on its own key), default 1
//   SECS     measuring time, default 5
// Each worker cycles lock(10 s) + unlock. Prints one JSON line:
// cycles_per_sec and the p50/p99/max of one cycle in microseconds.
'use strict';
const Redis = require('ioredis');
const Redlock = require('redlock');

const env = process.env;
const PORTS = (env.PORTS || '6379').split(',').map(Number);
const WORKERS = +(env.WORKERS || 1), SECS = +(env.SECS || 5);

async function main() {
  const clients = PORTS.map(port => new Redis({ port, host: '127.0.0.1' }));
  await Promise.all(clients.map(c => c.ping()));
  // Retries as npm redlock's defaults, which an uncontended run never needs.
  const redlock = new Redlock(clients, { retryCount: -1, retryDelay: 200, retryJitter: 100 });
  const end = Date.now() + SECS * 1000;
  let ops = 0;
  const lat = [];
  async function worker(i) {
    const key = `rlbench:${process.pid}:${i}`;
    while (Date.now() < end) {
      const t0 = process.hrtime.bigint();
      const l = await redlock.lock(key, 10000);
      await l.unlock();
      lat.push(Number(process.hrtime.bigint() - t0) / 1000);
      ops++;
    }
  }
  const t0 = Date.now();
  await Promise.all([...Array(WORKERS).keys()].map(worker));
  const secs = (Date.now() - t0) / 1000;
  clients.forEach(c => c.disconnect());
  lat.sort((a, b) => a - b);
  const pct = p => +(lat[Math.min(lat.length - 1, Math.floor(lat.length * p))] || 0).toFixed(1);
  console.log(JSON.stringify({
    lib: 'npm-redlock', servers: PORTS.length, workers: WORKERS,
    cycles_per_sec: Math.round(ops / secs),
    p50_us: pct(0.5), p99_us: pct(0.99), max_us: pct(1),
  }));
}
main().catch(e => { console.error('peer.js:', e && e.message ? e.message : e); process.exit(1); });
