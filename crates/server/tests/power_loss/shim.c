/*
 * Power-loss recorder, loaded into the server with LD_PRELOAD by tests/crash.rs.
 *
 * It wraps the calls that make data durable and, after each one succeeds, appends what became
 * durable to the log file named by POWER_LOSS_LOG. After a SIGKILL the test replays the log and
 * cuts every file back to what a power cut would have left (see crash.rs for the model).
 *
 * Log lines, tab separated, each batch written with one write(2) on an O_APPEND descriptor so
 * lines from concurrent threads never interleave:
 *   file      <device> <inode> <size> <path>   fsync/fdatasync of a regular file: its first
 *                                              <size> bytes are durable (size taken BEFORE the
 *                                              call, so bytes appended during it do not count)
 *   directory <device> <inode> <path>          fsync of a directory, followed by one line
 *   entry     <device> <inode> <path>          per regular file it then held (names durable)
 *   rename    <old path> <new path>            a successful rename (the file keeps its data)
 *   range     <device> <inode> <end> <path>    sync_file_range: diagnostic only, it makes
 *                                              nothing durable (no metadata, no guarantee)
 * sync() and syncfs() record every directory the process has open or has a file open in.
 *
 * Paths are absolute with symbolic links resolved, as /proc/self/fd shows them.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

struct buffer {
    char *bytes;
    size_t length;
    size_t capacity;
};

static void buffer_append(struct buffer *buffer, const char *format, ...) {
    for (;;) {
        size_t available = buffer->capacity - buffer->length;
        va_list arguments;
        va_start(arguments, format);
        int needed = vsnprintf(buffer->bytes ? buffer->bytes + buffer->length : NULL, available, format, arguments);
        va_end(arguments);
        if (needed < 0) {
            return;
        }
        if ((size_t)needed < available) {
            buffer->length += (size_t)needed;
            return;
        }
        size_t capacity = buffer->capacity * 2 + (size_t)needed + 256;
        char *grown = realloc(buffer->bytes, capacity);
        if (grown == NULL) {
            return;
        }
        buffer->bytes = grown;
        buffer->capacity = capacity;
    }
}

/* Writes the whole buffer to the log with one write(2), then frees it. */
static void buffer_flush(struct buffer *buffer) {
    const char *log_path = getenv("POWER_LOSS_LOG");
    if (log_path != NULL && buffer->length > 0) {
        int saved_errno = errno;
        int log = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (log >= 0) {
            ssize_t written = write(log, buffer->bytes, buffer->length);
            (void)written;
            close(log);
        }
        errno = saved_errno;
    }
    free(buffer->bytes);
    buffer->bytes = NULL;
    buffer->length = 0;
    buffer->capacity = 0;
}

static int descriptor_path(int descriptor, char *path, size_t size) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", descriptor);
    ssize_t length = readlink(link, path, size - 1);
    if (length < 0) {
        return -1;
    }
    path[length] = '\0';
    return 0;
}

/* Lists the regular files of a directory as `entry` lines. */
static void append_directory_entries(struct buffer *buffer, const char *directory_path) {
    DIR *directory = opendir(directory_path);
    if (directory == NULL) {
        return;
    }
    struct dirent *entry;
    while ((entry = readdir(directory)) != NULL) {
        struct stat status;
        if (fstatat(dirfd(directory), entry->d_name, &status, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(status.st_mode)) {
            buffer_append(buffer, "entry\t%llu\t%llu\t%s/%s\n", (unsigned long long)status.st_dev,
                          (unsigned long long)status.st_ino, directory_path, entry->d_name);
        }
    }
    closedir(directory);
}

/* Describes what a successful fsync/fdatasync of `descriptor` would make durable, taken before
 * the call: a file's current size, or a directory's current entries. */
static void describe_sync(int descriptor, struct buffer *buffer) {
    struct stat status;
    char path[PATH_MAX];
    if (fstat(descriptor, &status) != 0 || descriptor_path(descriptor, path, sizeof path) != 0) {
        return;
    }
    if (S_ISREG(status.st_mode)) {
        buffer_append(buffer, "file\t%llu\t%llu\t%lld\t%s\n", (unsigned long long)status.st_dev,
                      (unsigned long long)status.st_ino, (long long)status.st_size, path);
    } else if (S_ISDIR(status.st_mode)) {
        buffer_append(buffer, "directory\t%llu\t%llu\t%s\n", (unsigned long long)status.st_dev,
                      (unsigned long long)status.st_ino, path);
        append_directory_entries(buffer, path);
    }
}

static void discard(struct buffer *buffer) {
    free(buffer->bytes);
    buffer->bytes = NULL;
    buffer->length = 0;
    buffer->capacity = 0;
}

typedef int (*descriptor_function)(int);

static int wrapped_sync(const char *name, int descriptor) {
    static descriptor_function real_fsync, real_fdatasync;
    descriptor_function *slot = strcmp(name, "fsync") == 0 ? &real_fsync : &real_fdatasync;
    if (*slot == NULL) {
        *slot = (descriptor_function)dlsym(RTLD_NEXT, name);
    }
    struct buffer buffer = {0};
    describe_sync(descriptor, &buffer);
    int result = (*slot)(descriptor);
    int saved_errno = errno;
    if (result == 0) {
        buffer_flush(&buffer);
    } else {
        discard(&buffer);
    }
    errno = saved_errno;
    return result;
}

int fsync(int descriptor) {
    return wrapped_sync("fsync", descriptor);
}

int fdatasync(int descriptor) {
    return wrapped_sync("fdatasync", descriptor);
}

int sync_file_range(int descriptor, off64_t offset, off64_t bytes, unsigned int flags) {
    static int (*real)(int, off64_t, off64_t, unsigned int);
    if (real == NULL) {
        real = (int (*)(int, off64_t, off64_t, unsigned int))dlsym(RTLD_NEXT, "sync_file_range");
    }
    int result = real(descriptor, offset, bytes, flags);
    struct stat status;
    char path[PATH_MAX];
    if (result == 0 && fstat(descriptor, &status) == 0 && descriptor_path(descriptor, path, sizeof path) == 0) {
        int saved_errno = errno;
        struct buffer buffer = {0};
        long long end = bytes == 0 ? (long long)status.st_size : (long long)(offset + bytes);
        buffer_append(&buffer, "range\t%llu\t%llu\t%lld\t%s\n", (unsigned long long)status.st_dev,
                      (unsigned long long)status.st_ino, end, path);
        buffer_flush(&buffer);
        errno = saved_errno;
    }
    return result;
}

/* Records a directory and every regular file directly in it (with its size) as durable. */
static void record_directory(const char *directory_path) {
    struct stat status;
    if (stat(directory_path, &status) != 0 || !S_ISDIR(status.st_mode)) {
        return;
    }
    struct buffer buffer = {0};
    buffer_append(&buffer, "directory\t%llu\t%llu\t%s\n", (unsigned long long)status.st_dev,
                  (unsigned long long)status.st_ino, directory_path);
    append_directory_entries(&buffer, directory_path);
    DIR *directory = opendir(directory_path);
    if (directory != NULL) {
        struct dirent *entry;
        while ((entry = readdir(directory)) != NULL) {
            if (fstatat(dirfd(directory), entry->d_name, &status, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(status.st_mode)) {
                buffer_append(&buffer, "file\t%llu\t%llu\t%lld\t%s/%s\n", (unsigned long long)status.st_dev,
                              (unsigned long long)status.st_ino, (long long)status.st_size, directory_path,
                              entry->d_name);
            }
        }
        closedir(directory);
    }
    buffer_flush(&buffer);
}

#define MAX_DIRECTORIES 64

/* After sync()/syncfs(): records every directory the process has open, or has a regular file
 * open in (the database directory always qualifies: the server holds its LOCK file and the
 * WAL open). Sizes are taken after the call, which may count bytes appended during it; RocksDB
 * never calls either function, this is here so that a future caller is not silently missed. */
static void record_everything(void) {
    int saved_errno = errno;
    char (*directories)[PATH_MAX] = calloc(MAX_DIRECTORIES, PATH_MAX);
    int count = 0;
    DIR *descriptors = directories == NULL ? NULL : opendir("/proc/self/fd");
    if (descriptors != NULL) {
        struct dirent *entry;
        while ((entry = readdir(descriptors)) != NULL && count < MAX_DIRECTORIES) {
            char path[PATH_MAX];
            struct stat status;
            if (entry->d_name[0] == '.' || descriptor_path(atoi(entry->d_name), path, sizeof path) != 0 ||
                path[0] != '/' || strncmp(path, "/proc/", 6) == 0 || stat(path, &status) != 0) {
                continue;
            }
            if (S_ISREG(status.st_mode)) {
                char parent[PATH_MAX];
                snprintf(parent, sizeof parent, "%s", dirname(path));
                snprintf(path, sizeof path, "%s", parent);
            } else if (!S_ISDIR(status.st_mode)) {
                continue;
            }
            int known = 0;
            for (int index = 0; index < count && !known; index++) {
                known = strcmp(directories[index], path) == 0;
            }
            if (!known) {
                snprintf(directories[count++], PATH_MAX, "%s", path);
            }
        }
        closedir(descriptors);
    }
    for (int index = 0; index < count; index++) {
        record_directory(directories[index]);
    }
    free(directories);
    errno = saved_errno;
}

void sync(void) {
    static void (*real)(void);
    if (real == NULL) {
        real = (void (*)(void))dlsym(RTLD_NEXT, "sync");
    }
    /* Everything written before the call is durable once it returns. */
    real();
    record_everything();
}

int syncfs(int descriptor) {
    static int (*real)(int);
    if (real == NULL) {
        real = (int (*)(int))dlsym(RTLD_NEXT, "syncfs");
    }
    int result = real(descriptor);
    if (result == 0) {
        record_everything();
    }
    return result;
}

/* `path` relative to `directory_descriptor`, made absolute with its directory's links resolved. */
static int absolute_path(int directory_descriptor, const char *path, char *out, size_t size) {
    char joined[PATH_MAX];
    if (path[0] == '/') {
        snprintf(joined, sizeof joined, "%s", path);
    } else {
        char base[PATH_MAX];
        if (directory_descriptor == AT_FDCWD) {
            if (getcwd(base, sizeof base) == NULL) {
                return -1;
            }
        } else if (descriptor_path(directory_descriptor, base, sizeof base) != 0) {
            return -1;
        }
        if (snprintf(joined, sizeof joined, "%s/%s", base, path) >= (int)sizeof joined) {
            return -1;
        }
    }
    char directory_part[PATH_MAX], name_part[PATH_MAX], resolved[PATH_MAX];
    snprintf(directory_part, sizeof directory_part, "%s", joined);
    snprintf(name_part, sizeof name_part, "%s", joined);
    if (realpath(dirname(directory_part), resolved) == NULL) {
        return -1;
    }
    return snprintf(out, size, "%s/%s", resolved, basename(name_part)) < (int)size ? 0 : -1;
}

static void record_rename(int old_directory, const char *old_path, int new_directory, const char *new_path) {
    char old_absolute[PATH_MAX], new_absolute[PATH_MAX];
    int saved_errno = errno;
    if (absolute_path(old_directory, old_path, old_absolute, sizeof old_absolute) == 0 &&
        absolute_path(new_directory, new_path, new_absolute, sizeof new_absolute) == 0) {
        struct buffer buffer = {0};
        buffer_append(&buffer, "rename\t%s\t%s\n", old_absolute, new_absolute);
        buffer_flush(&buffer);
    }
    errno = saved_errno;
}

int rename(const char *old_path, const char *new_path) {
    static int (*real)(const char *, const char *);
    if (real == NULL) {
        real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    }
    int result = real(old_path, new_path);
    if (result == 0) {
        record_rename(AT_FDCWD, old_path, AT_FDCWD, new_path);
    }
    return result;
}

int renameat(int old_directory, const char *old_path, int new_directory, const char *new_path) {
    static int (*real)(int, const char *, int, const char *);
    if (real == NULL) {
        real = (int (*)(int, const char *, int, const char *))dlsym(RTLD_NEXT, "renameat");
    }
    int result = real(old_directory, old_path, new_directory, new_path);
    if (result == 0) {
        record_rename(old_directory, old_path, new_directory, new_path);
    }
    return result;
}

int renameat2(int old_directory, const char *old_path, int new_directory, const char *new_path, unsigned int flags) {
    static int (*real)(int, const char *, int, const char *, unsigned int);
    if (real == NULL) {
        real = (int (*)(int, const char *, int, const char *, unsigned int))dlsym(RTLD_NEXT, "renameat2");
    }
    int result = real(old_directory, old_path, new_directory, new_path, flags);
    if (result == 0) {
        record_rename(old_directory, old_path, new_directory, new_path);
    }
    return result;
}
