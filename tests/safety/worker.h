/* worker.h: the lock-taking processes of the safety suite (see worker.c). */
#ifndef DLOCK_SAFETY_WORKER_H
#define DLOCK_SAFETY_WORKER_H

/* argv: the options after the mode word. Return the exit status. */
int worker_main(int argc, char **argv);
int cmd_main(int argc, char **argv);

#endif
