// CuratorPeer.java: the peer of bench/zk/compare.sh, Apache Curator's
// InterProcessMutex measured as dlock bench measures its lock, and the
// server's own ceiling for the writes that lock makes.
//   java CuratorPeer CONNECT uncontended|contended|ceiling THREADS SECS HOLD_MS START_MS
// uncontended: each thread cycles acquire+release on a lock of its own
// (latency = the cycle); contended: every thread (and every JVM started
// with the same arguments) on one lock, holding it HOLD_MS (latency = the
// wait); ceiling: no lock library, THREADS is the window W of write pairs
// in flight (see ceiling()). Prints one JSON line with dlock bench's field
// names.
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;

public class CuratorPeer {
  public static void main(String[] a) throws Exception {
    String mode = a[1];
    boolean contended = mode.equals("contended");
    int threads = Integer.parseInt(a[2]);
    long secs = Long.parseLong(a[3]);
    long holdMs = Long.parseLong(a[4]);
    CuratorFramework c =
        CuratorFrameworkFactory.newClient(a[0], 60000, 15000, new RetryOneTime(100));
    c.start();
    c.blockUntilConnected(15, TimeUnit.SECONDS);
    String self = ProcessHandle.current().pid() + "";
    // Start together with the other JVMs: at START_MS (epoch ms).
    long startMs = Long.parseLong(a[5]);
    long endMs = startMs + secs * 1000;
    if (mode.equals("ceiling")) {
      ceiling(c, self, threads, secs, startMs, endMs);
      c.close();
      return;
    }
    AtomicLong ops = new AtomicLong();
    List<Long> lat = Collections.synchronizedList(new ArrayList<>());
    AtomicLong heldNs = new AtomicLong();
    Thread[] ts = new Thread[threads];
    for (int i = 0; i < threads; i++) {
      String path = contended ? "/curator-bench/one" : "/curator-bench/u-" + self + "/" + i;
      ts[i] = new Thread(() -> {
        InterProcessMutex m = new InterProcessMutex(c, path);
        try {
          long wait = startMs - System.currentTimeMillis();
          if (wait > 0) Thread.sleep(wait);
          while (System.currentTimeMillis() < endMs) {
            long t0 = System.nanoTime();
            long left = endMs - System.currentTimeMillis();
            if (!m.acquire(Math.max(left, 1), TimeUnit.MILLISECONDS)) break;
            long t1 = System.nanoTime();
            if (holdMs > 0) Thread.sleep(holdMs);
            long t2 = System.nanoTime();
            m.release();
            long t3 = System.nanoTime();
            lat.add(((contended ? t1 : t3) - t0) / 1000);
            heldNs.addAndGet(t2 - t1);
            ops.incrementAndGet();
          }
        } catch (Exception e) {
          throw new RuntimeException(e);
        }
      });
      ts[i].start();
    }
    for (Thread t : ts) t.join();
    Collections.sort(lat);
    int n = lat.size();
    System.out.printf(
        "{\"lib\":\"curator\",\"scenario\":\"%s\",\"threads\":%d,\"ops\":%d,"
            + "\"secs\":%d,\"ops_per_sec\":%.0f,\"p50_us\":%d,\"p99_us\":%d,"
            + "\"held_s\":%.3f}%n",
        mode, threads, ops.get(), secs, (double) ops.get() / secs,
        n > 0 ? lat.get(n / 2) : 0, n > 0 ? lat.get((int) (n * 0.99)) : 0,
        heldNs.get() / 1e9);
    c.close();
  }

  // The server's ceiling for the lock's writes, for one session: no lock
  // library and no waits between requests. W pairs stay in flight on the
  // raw ZooKeeper handle; a pair is the create of an EPHEMERAL_SEQUENTIAL
  // node under a fresh parent (the node a lock makes) and, once the create
  // has answered, the delete of that node (version -1), as a release does.
  // The window opens as soon as the session is up, so the client's JIT
  // is warm by START_MS; a pair counts if its delete answers between
  // START_MS and END_MS; latency = the pair. W = 1 gives the two writes'
  // latency back to back, the floor of one thread's cycle; a large W the
  // most pairs the server executes a second.
  // The callbacks all run on the client's one event thread, so the counters
  // need no locks; the latch hands them to the main thread.
  static void ceiling(CuratorFramework c, String self, int window, long secs,
      long startMs, long endMs) throws Exception {
    String parent = "/dlock-ceiling/" + self;
    c.create().creatingParentsIfNeeded().forPath(parent);
    ZooKeeper zk = c.getZookeeperClient().getZooKeeper();
    String prefix = parent + "/lock-";
    long[] pairs = {0};
    List<Long> lat = new ArrayList<>();
    String[] error = {null};
    CountDownLatch done = new CountDownLatch(window);
    // One pair, then the next while the clock runs; counts the latch down
    // once this slot of the window stops.
    class Slot {
      void start() {
        if (error[0] != null || System.currentTimeMillis() >= endMs) {
          done.countDown();
          return;
        }
        long t0 = System.nanoTime();
        zk.create(prefix, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE,
            CreateMode.EPHEMERAL_SEQUENTIAL, (rc, path, ctx, name) -> {
              if (rc != KeeperException.Code.OK.intValue()) {
                fail("create", rc);
                return;
              }
              zk.delete(name, -1, (rc2, path2, ctx2) -> {
                if (rc2 != KeeperException.Code.OK.intValue()) {
                  fail("delete", rc2);
                  return;
                }
                long now = System.currentTimeMillis();
                if (now >= startMs && now <= endMs) {
                  pairs[0]++;
                  lat.add((System.nanoTime() - t0) / 1000);
                }
                start();
              }, null);
            }, null);
      }
      void fail(String op, int rc) {
        error[0] = op + ": " + KeeperException.Code.get(rc);
        done.countDown();
      }
    }
    for (int i = 0; i < window; i++) new Slot().start();
    done.await();
    if (error[0] != null) {
      System.err.println("ceiling: " + error[0]);
      System.exit(1);
    }
    c.delete().forPath(parent);
    Collections.sort(lat);
    int n = lat.size();
    System.out.printf(
        "{\"lib\":\"zookeeper\",\"scenario\":\"ceiling\",\"threads\":1,"
            + "\"window\":%d,\"ops\":%d,\"secs\":%d,\"ops_per_sec\":%.0f,"
            + "\"p50_us\":%d,\"p99_us\":%d,\"held_s\":0}%n",
        window, pairs[0], secs, (double) pairs[0] / secs,
        n > 0 ? lat.get(n / 2) : 0, n > 0 ? lat.get((int) (n * 0.99)) : 0);
  }
}
