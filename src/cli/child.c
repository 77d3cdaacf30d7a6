/* child.c: dlock run's and dlock elect's COMMAND: started in a process
 * group of its own (in the foreground of the terminal if we were), the
 * signals that would stop us passed on, stopped when the hold is lost.
 * The signals are taken with sigtimedwait by the main thread (run.c). */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int64_t cli_mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int cli_wait_signal(const sigset_t *set, int64_t deadline_ms) {
  for (;;) {
    int sig;
    if (deadline_ms < 0) {
      sig = sigwaitinfo(set, NULL);
    } else {
      int64_t left = deadline_ms - cli_mono_ms();
      if (left <= 0) return 0;
      struct timespec ts = {left / 1000, (left % 1000) * 1000000L};
      sig = sigtimedwait(set, NULL, &ts);
      if (sig < 0 && errno == EAGAIN) return 0;
    }
    if (sig > 0) return sig;
  }
}

/* Child side: own process group (foreground on the terminal if we were),
 * environment, exec. Reports exec's errno on `errfd` and exits 127. */
static void child(char **cmd, int errfd, const sigset_t *orig, bool take_tty) {
  setpgid(0, 0);
  if (take_tty) tcsetpgrp(STDIN_FILENO, getpid()); /* SIGTTOU is blocked */
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP) signal(s, SIG_DFL);
  sigprocmask(SIG_SETMASK, orig, NULL);
  execvp(cmd[0], cmd);
  int e = errno;
  if (write(errfd, &e, sizeof e) != sizeof e) _exit(EXIT_NOTFOUND);
  _exit(EXIT_NOTFOUND);
}

int cli_run_child(char **cmd, const char *held, int64_t grace_ms, int verbose,
                  const sigset_t *set, const sigset_t *orig, bool *ran,
                  bool *lost) {
  *ran = false;
  *lost = false;
  bool take_tty = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp();
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) != 0) {
    cli_err("pipe: %s", strerror(errno));
    return -1;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(errpipe[0]);
    child(cmd, errpipe[1], orig, take_tty);
  }
  close(errpipe[1]);
  if (pid < 0) {
    cli_err("fork: %s", strerror(errno));
    close(errpipe[0]);
    return -1;
  }
  setpgid(pid, pid); /* also here: no race with signals we forward */
  int exec_errno = 0, rc = 0, status = 0;
  ssize_t got = read(errpipe[0], &exec_errno, sizeof exec_errno);
  close(errpipe[0]);
  if (got == (ssize_t)sizeof exec_errno) { /* exec failed */
    waitpid(pid, &status, 0);
    cli_err("%s: %s", cmd[0],
            exec_errno == ENOENT ? "command not found" : strerror(exec_errno));
    rc = exec_errno == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC;
  } else {
    *ran = true;
    /* The library reports a loss of any kind (a fixed lease that ends
     * included, at its validity's end) through on_lost: SIGUSR1. */
    int64_t kill_at = -1;
    for (;;) {
      int sig = cli_wait_signal(set, kill_at);
      if (sig == SIGCHLD) {
        if (waitpid(pid, &status, WNOHANG) == pid) break;
        continue;
      }
      if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT) {
        if (verbose > 0) cli_err("forwarding signal %d", sig);
        kill(-pid, sig);
        continue;
      }
      if (sig == 0 && kill_at >= 0) {
        kill(-pid, SIGKILL);
        kill_at = -1;
        continue;
      }
      if (sig == SIGUSR1 && !*lost) {
        /* Lost: the lease could not be renewed, it was taken or
         * force-released, or a fixed lease ran out. */
        *lost = true;
        if (verbose >= 0)
          cli_err("lost %s; stopping %s (SIGTERM, SIGKILL in %lld ms)", held,
                  cmd[0], (long long)grace_ms);
        kill(-pid, SIGTERM);
        kill_at = cli_mono_ms() + grace_ms;
      }
    }
    if (WIFEXITED(status))
      rc = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
      rc = 128 + WTERMSIG(status);
  }
  if (take_tty) tcsetpgrp(STDIN_FILENO, getpgrp());
  return rc;
}
