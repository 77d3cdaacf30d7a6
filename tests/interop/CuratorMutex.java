// CuratorMutex.java: Curator's own InterProcessMutex and
// InterProcessReadWriteLock, for the interop test (tests/test_zk_interop.sh).
// One line on stdout per step, flushed. A step "r:STEP" or "w:STEP" works
// on the read or the write lock of the read-write lock at PATH.
//   CuratorMutex CONNECT PATH hold MS   acquire, print "held", hold MS, release
//   CuratorMutex CONNECT PATH try MS    acquire within MS: "held" + exit 0
//                                       (released), else "busy" + exit 75
//   CuratorMutex CONNECT PATH wait      acquire (no limit), "held", release
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.RetryOneTime;

public class CuratorMutex {
  public static void main(String[] a) throws Exception {
    CuratorFramework c = CuratorFrameworkFactory.newClient(a[0], 10000, 5000,
        new RetryOneTime(100));
    c.start();
    c.blockUntilConnected(10, TimeUnit.SECONDS);
    InterProcessMutex m;
    String step = a[2];
    if (step.startsWith("r:") || step.startsWith("w:")) {
      InterProcessReadWriteLock rw = new InterProcessReadWriteLock(c, a[1]);
      m = step.startsWith("r:") ? rw.readLock() : rw.writeLock();
      step = step.substring(2);
    } else {
      m = new InterProcessMutex(c, a[1]);
    }
    int status = 0;
    switch (step) {
      case "hold":
        m.acquire();
        System.out.println("held " + System.currentTimeMillis());
        Thread.sleep(Long.parseLong(a[3]));
        System.out.println("released " + System.currentTimeMillis());
        m.release();
        break;
      case "try":
        if (m.acquire(Long.parseLong(a[3]), TimeUnit.MILLISECONDS)) {
          System.out.println("held");
          m.release();
        } else {
          System.out.println("busy");
          status = 75;
        }
        break;
      case "wait":
        m.acquire();
        System.out.println("held " + System.currentTimeMillis());
        m.release();
        break;
      default:
        status = 64;
    }
    System.out.flush();
    c.close();
    System.exit(status);
  }
}
