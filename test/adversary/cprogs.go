package main

// cPrograms are compiled with cc once per run (MARKER defined on the
// command line) and copied into each fixture that needs them.
var cPrograms = map[string]string{
	// tool-elf is the outside program: it prints a secret when it runs.
	"tool-elf": `#include <stdio.h>
int main(void) { puts("elf-" MARKER); return 0; }
`,

	// uring-open opens argv[1] with IORING_OP_OPENAT on a raw io_uring (no
	// liburing) and prints what it reads. The open runs in an io-wq
	// worker, not in the openat system call.
	"uring-open": `#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *map(int ring, size_t len, off_t off) {
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, off);
	if (p == MAP_FAILED) {
		perror("mmap io_uring");
		_exit(1);
	}
	return p;
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: uring-open FILE\n");
		return 2;
	}
	struct io_uring_params p;
	memset(&p, 0, sizeof p);
	int ring = syscall(__NR_io_uring_setup, 4, &p);
	if (ring < 0) {
		int e = errno;
		printf("SKIP: io_uring_setup: %s\n", strerror(e));
		return e == ENOSYS || e == EPERM ? 77 : 1;
	}
	char *sq = map(ring, p.sq_off.array + p.sq_entries * sizeof(unsigned), IORING_OFF_SQ_RING);
	char *cq = map(ring, p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe), IORING_OFF_CQ_RING);
	struct io_uring_sqe *sqes = map(ring, p.sq_entries * sizeof(struct io_uring_sqe), IORING_OFF_SQES);

	struct io_uring_sqe *sqe = &sqes[0];
	memset(sqe, 0, sizeof *sqe);
	sqe->opcode = IORING_OP_OPENAT;
	sqe->fd = AT_FDCWD;
	sqe->addr = (unsigned long)argv[1];
	sqe->open_flags = O_RDONLY;

	unsigned *tail = (unsigned *)(sq + p.sq_off.tail);
	unsigned *mask = (unsigned *)(sq + p.sq_off.ring_mask);
	unsigned *array = (unsigned *)(sq + p.sq_off.array);
	unsigned t = *tail;
	array[t & *mask] = 0;
	__atomic_store_n(tail, t + 1, __ATOMIC_RELEASE);

	if (syscall(__NR_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0) {
		perror("io_uring_enter");
		return 1;
	}
	unsigned *head = (unsigned *)(cq + p.cq_off.head);
	unsigned *ctail = (unsigned *)(cq + p.cq_off.tail);
	unsigned *cmask = (unsigned *)(cq + p.cq_off.ring_mask);
	struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
	unsigned h = *head;
	if (h == __atomic_load_n(ctail, __ATOMIC_ACQUIRE)) {
		fprintf(stderr, "io_uring: no completion\n");
		return 1;
	}
	int fd = cqes[h & *cmask].res;
	__atomic_store_n(head, h + 1, __ATOMIC_RELEASE);
	if (fd < 0) {
		fprintf(stderr, "io_uring openat %s: %s\n", argv[1], strerror(-fd));
		return 1;
	}
	char buf[4096];
	ssize_t n = read(fd, buf, sizeof buf);
	if (n < 0) {
		perror("read");
		return 1;
	}
	fwrite(buf, 1, n, stdout);
	return 0;
}
`,
}
