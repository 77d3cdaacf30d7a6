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
  /* The options' size comes from this header, through the library. */
  dlock_client_options o;
  dlock_client_options_init(&o);
  if (o.size != sizeof o || o.connect_timeout_ms != 2000) {
    fprintf(stderr, "options: size %zu, expected %zu\n", o.size, sizeof o);
    return 1;
  }
  printf("dlock %s (%s)\n", v, dlock_strerror(DLOCK_EBUSY));
  return 0;
}
