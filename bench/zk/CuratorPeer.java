// CuratorPeer.java: the peer of bench/zk/compare.sh, Apache Curator's
// InterProcessMutex measured as dlock bench measures its lock.
//   java CuratorPeer CONNECT uncontended|contended THREADS SECS HOLD_MS START_MS
// uncontended: each thread cycles acquire+release on a lock of its own
// (latency = the cycle); contended: every thread (and every JVM started
// with the same arguments) on one lock, holding it HOLD_MS (latency = the
// wait). Prints one JSON line with dlock bench's field names.
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;

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
}
