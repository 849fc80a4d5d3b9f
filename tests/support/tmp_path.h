/* Temporary files and folders of the tests: made under /tmp with the
 * test's tag in their names (/tmp/rs-<tag>-XXXXXX), and removed with all
 * they hold. Making one fails the test when the system refuses. */
#ifndef RS_TEST_TMP_PATH_H
#define RS_TEST_TMP_PATH_H

#include <stddef.h>

/* A new file holding len bytes of data; its path, malloc'd. */
char *tmp_write(const char *tag, const void *data, size_t len);

/* A new folder; its path in out (n bytes). */
void tmp_dir(char *out, size_t n, const char *tag);

/* Removes path and all below it: 0, or -1 with a line on stderr. Does
 * nothing for an empty path. */
int tmp_remove(const char *path);

#endif
