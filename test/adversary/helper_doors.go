package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Helpers for the doors of the cell that face the other way (outside
// processes reaching in), for descriptors passed between them, and for the
// scratch places' marks.

func init() {
	helpers["in-client"] = inClient
	helpers["in-dgram-client"] = inDgramClient
	helpers["listen-unix"] = listenUnix
	helpers["listen-dgram"] = listenDgram
	helpers["fd-server"] = fdServer
	helpers["recv-fd"] = recvFD
	helpers["mark-reuse"] = markReuse
}

// inClient is an outside process of the user that keeps connecting to ADDR
// (a socket it expects a tool of its own to have bound: an IDE helper, a
// D-Bus name) and, once connected, sends its secret and hands over its
// descriptor of KEYFILE.
func inClient(args []string) error {
	if err := argc(args, 2, "in-client ADDR KEYFILE"); err != nil {
		return err
	}
	key, err := os.Open(args[1])
	if err != nil {
		return err
	}
	defer key.Close()
	fmt.Println("ready")
	for {
		c, err := net.Dial("unix", args[0])
		if err != nil {
			// Not bound yet, or refused (each refusal is a record).
			time.Sleep(100 * time.Millisecond)
			continue
		}
		_, _, err = c.(*net.UnixConn).WriteMsgUnix([]byte("client-"+os.Getenv("VICTIM_SECRET")+"\n"),
			syscall.UnixRights(int(key.Fd())), nil)
		c.Close()
		fmt.Printf("connected: %v\n", err)
		time.Sleep(100 * time.Millisecond)
	}
}

// inDgramClient keeps sending its secret in datagrams to PATH.
func inDgramClient(args []string) error {
	if err := argc(args, 1, "in-dgram-client PATH"); err != nil {
		return err
	}
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	msg := []byte("dgram-" + os.Getenv("VICTIM_SECRET"))
	for {
		if err := syscall.Sendto(fd, msg, 0, &syscall.SockaddrUnix{Name: args[0]}); err == nil {
			fmt.Println("sent")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// inWait is how long the jailed listeners wait for the outside client.
const inWait = 4 * time.Second

// listenUnix binds ADDR (a path, or @NAME for an abstract name), takes one
// connection and prints what it brought: its data, and the content of any
// descriptor passed with it.
func listenUnix(args []string) error {
	if err := argc(args, 1, "listen-unix ADDR"); err != nil {
		return err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: args[0], Net: "unix"})
	if err != nil {
		return err
	}
	defer l.Close()
	l.SetDeadline(time.Now().Add(inWait))
	c, err := l.AcceptUnix()
	if err != nil {
		return fmt.Errorf("nobody connected in %v: %w", inWait, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(inWait))
	return printMsg(c)
}

// printMsg prints one message of c and the content of the descriptors it
// carried.
func printMsg(c *net.UnixConn) error {
	buf, oob := make([]byte, 4096), make([]byte, 256)
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return err
	}
	fmt.Printf("got %q\n", buf[:n])
	if flags&syscall.MSG_CTRUNC != 0 {
		fmt.Println("the descriptors were dropped (MSG_CTRUNC)")
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return err
	}
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			b := make([]byte, 4096)
			k, err := syscall.Pread(fd, b, 0)
			if err != nil {
				fmt.Printf("descriptor %d: %v\n", fd, err)
				continue
			}
			fmt.Printf("descriptor %d holds %q\n", fd, b[:k])
		}
	}
	return nil
}

// listenDgram binds PATH as a datagram socket and prints the first datagram.
func listenDgram(args []string) error {
	if err := argc(args, 1, "listen-dgram PATH"); err != nil {
		return err
	}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: args[0], Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(inWait))
	buf := make([]byte, 4096)
	n, _, err := c.ReadFrom(buf)
	if err != nil {
		return fmt.Errorf("no datagram in %v: %w", inWait, err)
	}
	fmt.Printf("got %q\n", buf[:n])
	return nil
}

// fdServer is an outside service at PATH (one the user lets the agent use)
// that answers each client with a descriptor of KEYFILE, as a credential or
// file-handing daemon would.
func fdServer(args []string) error {
	if err := argc(args, 2, "fd-server PATH KEYFILE"); err != nil {
		return err
	}
	key, err := os.Open(args[1])
	if err != nil {
		return err
	}
	defer key.Close()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: args[0], Net: "unix"})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return err
		}
		_, _, err = c.WriteMsgUnix([]byte("here"), syscall.UnixRights(int(key.Fd())), nil)
		c.Close()
		fmt.Printf("handed a descriptor: %v\n", err)
	}
}

// recvFD connects to PATH and prints what the message it gets carries.
func recvFD(args []string) error {
	if err := argc(args, 1, "recv-fd PATH"); err != nil {
		return err
	}
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: args[0], Net: "unix"})
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(inWait))
	return printMsg(c)
}

// markReuse tries to have the jail's "made here" mark of the scratch places
// land on files it did not make, SCRATCH/PREFIXnn for nn below N, all made
// outside and not in the dentry cache (a disk file system, after a drop of
// the caches). For each: make a directory in SCRATCH, fail to make a device
// node in it (no CAP_MKNOD: the kernel refuses after the LSM's path hook
// allowed it, so the create is pending and never happens), remove the
// directory (which frees the pending name), wait out an RCU grace period
// (membarrier), and open the file: its lookup allocates a dentry, which
// can be the freed one. One thread throughout: the pending create is the
// thread's own.
func markReuse(args []string) error {
	if err := argc(args, 3, "mark-reuse SCRATCH PREFIX N"); err != nil {
		return err
	}
	dir, prefix := args[0], args[1]
	n, err := strconv.Atoi(args[2])
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	sub := filepath.Join(dir, fmt.Sprintf("adv-reuse-%d", os.Getpid()))
	var got []string
	for i := 0; i < n; i++ {
		// Where the folder cannot be made (a jail that grants nothing in
		// the scratch places), the reads below are tried all the same.
		if err := syscall.Mkdir(sub, 0o700); err != nil {
			if i == 0 {
				fmt.Printf("mkdir %s: %v\n", sub, err)
			}
		} else {
			err := syscall.Mknod(filepath.Join(sub, "x"), syscall.S_IFCHR|0o600, 0x103)
			if !errors.Is(err, syscall.EPERM) {
				syscall.Unlink(filepath.Join(sub, "x"))
				syscall.Rmdir(sub)
				return fmt.Errorf("mknod of a device as a user: %v (want EPERM)", err)
			}
			if err := syscall.Rmdir(sub); err != nil {
				return fmt.Errorf("rmdir %s: %w", sub, err)
			}
		}
		// MEMBARRIER_CMD_GLOBAL waits for an RCU grace period: the
		// freed dentry is back in its slab after it.
		if _, _, e := syscall.Syscall(sysMembarrier, 1, 0, 0); e != 0 {
			time.Sleep(50 * time.Millisecond)
		}
		name := filepath.Join(dir, fmt.Sprintf("%s%02d", prefix, i))
		if b, err := os.ReadFile(name); err == nil {
			got = append(got, fmt.Sprintf("%s: %s", name, strings.TrimSpace(string(b))))
		}
	}
	fmt.Printf("read %d of %d foreign files\n", len(got), n)
	for _, g := range got {
		fmt.Println(g)
	}
	return nil
}
