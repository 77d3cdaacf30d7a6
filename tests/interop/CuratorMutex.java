// CuratorMutex.java: Curator's own InterProcessMutex and
// InterProcessReadWriteLock, for the interop test (tests/test_zk_interop.sh).
// One line on stdout per step, flushed. A step "r:STEP" or "w:STEP" works
// on the read or the write lock of the read-write lock at PATH.
//   CuratorMutex CONNECT PATH hold MS   acquire, print "held", hold MS, release
//                                       (MS may be a file's path: hold until
//                                       the file exists)
//   CuratorMutex CONNECT PATH try MS    acquire within MS: "held" + exit 0
//                                       (released), else "busy" + exit 75
//   CuratorMutex CONNECT PATH wait      acquire (no limit), "held", release
//   CuratorMutex CONNECT PATH sem N STEP [MS]  InterProcessSemaphoreV2 of N
//                                       leases: STEP hold, try or wait, as
//                                       for the mutex, on one lease
//   CuratorMutex CONNECT PATH lead ID MS   LeaderLatch as ID: "leader" once
//                                       elected, leads MS, "released", leaves
//   CuratorMutex CONNECT PATH latch ID MS  LeaderLatch as ID: "follower
//                                       LEADERID" if not the leader at once,
//                                       then "leader" within MS (exit 0) or
//                                       "busy" (exit 75), leaves
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;

public class CuratorMutex {
  public static void main(String[] a) throws Exception {
    CuratorFramework c = CuratorFrameworkFactory.newClient(a[0], 10000, 5000,
        new RetryOneTime(100));
    c.start();
    c.blockUntilConnected(10, TimeUnit.SECONDS);
    if (a[2].equals("lead") || a[2].equals("latch")) {
      System.exit(latch(c, a));
    }
    if (a[2].equals("sem")) {
      System.exit(semaphore(c, a));
    }
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
        pause(a[3]);
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

  // pause: sleep MS, or until the file at the path exists (a test's
  // holder then lives as long as its checks need, however loaded the machine).
  static void pause(String arg) throws Exception {
    if (!arg.startsWith("/")) {
      Thread.sleep(Long.parseLong(arg));
      return;
    }
    while (!new java.io.File(arg).exists()) Thread.sleep(20);
  }

  static int semaphore(CuratorFramework c, String[] a) throws Exception {
    InterProcessSemaphoreV2 s =
        new InterProcessSemaphoreV2(c, a[1], Integer.parseInt(a[3]));
    int status = 0;
    Lease l;
    switch (a[4]) {
      case "hold":
        l = s.acquire();
        System.out.println("held " + System.currentTimeMillis());
        System.out.flush();
        pause(a[5]);
        System.out.println("released " + System.currentTimeMillis());
        s.returnLease(l);
        break;
      case "try":
        l = s.acquire(Long.parseLong(a[5]), TimeUnit.MILLISECONDS);
        if (l != null) {
          System.out.println("held");
          s.returnLease(l);
        } else {
          System.out.println("busy");
          status = 75;
        }
        break;
      case "wait":
        l = s.acquire();
        System.out.println("held " + System.currentTimeMillis());
        s.returnLease(l);
        break;
      default:
        status = 64;
    }
    System.out.flush();
    c.close();
    return status;
  }

  static int latch(CuratorFramework c, String[] a) throws Exception {
    LeaderLatch l = new LeaderLatch(c, a[1], a[3]);
    l.start();
    long ms = Long.parseLong(a[4]);
    int status = 0;
    if (a[2].equals("lead")) {
      l.await();
      System.out.println("leader " + System.currentTimeMillis());
      System.out.flush();
      Thread.sleep(ms);
      System.out.println("released " + System.currentTimeMillis());
    } else {
      if (!l.await(500, TimeUnit.MILLISECONDS))
        System.out.println("follower " + l.getLeader().getId());
      if (l.hasLeadership() || l.await(ms, TimeUnit.MILLISECONDS)) {
        System.out.println("leader " + System.currentTimeMillis());
      } else {
        System.out.println("busy");
        status = 75;
      }
    }
    System.out.flush();
    l.close();
    c.close();
    return status;
  }
}
