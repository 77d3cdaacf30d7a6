// peer.js: drives one plain-lock peer for tests/test_interop_node.sh.
//   node peer.js PORT[,PORT...] LIB KEY MODE [GOFILE]
//   PORT  the servers (npm redlock: its quorum over all of them; the
//         Mutex: the first)
//   LIB   redlock (npm redlock 4.2: the lock is the string KEY)
//         mutex   (redis-semaphore 5.6 Mutex: the string "mutex:" + KEY)
//   MODE  try   one attempt: prints "acquired" (then releases) or "busy"
//         hold  acquires (retrying), prints "held", waits until GOFILE
//               exists, extends once, releases, prints "released"
//         wait  one attempt (prints "busy" if refused), then retries until
//               acquired: prints "acquired", releases, prints "released"
// Any error (a WRONGTYPE from the server, say) ends it with status 1.
'use strict';
const fs = require('fs');
const Redis = require('ioredis');
const Redlock = require('redlock');
const { Mutex } = require('redis-semaphore');

const [PORT, LIB, KEY, MODE, GOFILE] = process.argv.slice(2);
const TTL = 30000;
const clients = PORT.split(',').map(
  p => new Redis({ port: +p, host: '127.0.0.1', maxRetriesPerRequest: 1 }));
const client = clients[0];
const sleep = ms => new Promise(r => setTimeout(r, ms));

// One attempt: a release function, or null when someone else holds it.
async function attempt() {
  if (LIB === 'redlock') {
    const rl = new Redlock(clients, { retryCount: 0 });
    try {
      const l = await rl.lock(KEY, TTL);
      return { extend: () => l.extend(TTL), release: () => l.unlock() };
    } catch (e) {
      if (e instanceof Redlock.LockError) return null; // refused: not an error
      throw e;
    }
  }
  // It extends by itself every refreshInterval: "extend" lets a few run.
  const m = new Mutex(client, KEY, {
    lockTimeout: TTL, acquireTimeout: 1, retryInterval: 10, refreshInterval: 30,
    onLockLost: e => { console.error('peer.js: lock lost:', e.message); process.exit(1); },
  });
  if (!(await m.tryAcquire())) return null;
  return { extend: () => sleep(100), release: () => m.release() };
}

async function acquire() {
  for (;;) {
    const h = await attempt();
    if (h) return h;
    await sleep(20);
  }
}

async function main() {
  let h;
  if (MODE === 'try') {
    h = await attempt();
    console.log(h ? 'acquired' : 'busy');
    if (h) await h.release();
  } else if (MODE === 'hold') {
    h = await acquire();
    console.log('held');
    while (!fs.existsSync(GOFILE)) await sleep(10);
    await h.extend();
    await h.release();
    console.log('released');
  } else if (MODE === 'wait') {
    h = await attempt();
    if (!h) {
      console.log('busy');
      h = await acquire();
    }
    console.log('acquired');
    await h.release();
    console.log('released');
  } else {
    throw new Error('unknown mode ' + MODE);
  }
}

const disconnect = () => clients.forEach(c => c.disconnect());
main().then(disconnect, e => {
  console.error('peer.js:', e && e.message ? e.message : e);
  disconnect();
  process.exit(1);
});
