/* example.c: built against an installed libdlock by tests/install/check.sh. */
#include <dlock.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  int num = 0;
  const char *v = dlock_version(&num);
  if (strcmp(v, DLOCK_VERSION_STRING) != 0 || num != DLOCK_VERSION_NUM) {
    fprintf(stderr, "version mismatch: %s %d\n", v, num);
    return 1;
  }
  printf("dlock %s (%s)\n", v, dlock_strerror(DLOCK_ETIMEDOUT));
  return 0;
}
