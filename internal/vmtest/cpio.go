package vmtest

import (
	"fmt"
	"io"
	"strings"
)

// cpioEntry is one file of an initramfs. The archive is written here rather
// than with cpio(1) so that device nodes and ownership need no privileges and
// the file list stays a plain value that tests can inspect.
type cpioEntry struct {
	Name     string // path inside the archive, without leading slash
	Mode     uint32 // type and permission bits, as in stat(2)
	Data     []byte // file content, or link target for symlinks
	DevMajor uint32
	DevMinor uint32
}

const (
	modeDir  = 0o040000
	modeReg  = 0o100000
	modeLink = 0o120000
	modeChr  = 0o020000
)

// writeCPIO writes entries as a "newc" archive, the format the kernel
// unpacks into its initial rootfs.
func writeCPIO(w io.Writer, entries []cpioEntry) error {
	ino := uint32(1)
	for _, e := range entries {
		if err := writeCPIOEntry(w, ino, e); err != nil {
			return err
		}
		ino++
	}
	return writeCPIOEntry(w, 0, cpioEntry{Name: "TRAILER!!!"})
}

func writeCPIOEntry(w io.Writer, ino uint32, e cpioEntry) error {
	name := strings.TrimPrefix(e.Name, "/")
	nlink := uint32(1)
	if e.Mode&0o170000 == modeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, e.Mode, 0, 0, nlink, 0, len(e.Data), 0, 0, e.DevMajor, e.DevMinor, len(name)+1, 0)
	if _, err := io.WriteString(w, hdr+name+"\x00"+pad(len(hdr)+len(name)+1)); err != nil {
		return err
	}
	if _, err := w.Write(e.Data); err != nil {
		return err
	}
	_, err := io.WriteString(w, pad(len(e.Data)))
	return err
}

// pad returns the NULs that align n bytes to newc's 4-byte boundary.
func pad(n int) string { return strings.Repeat("\x00", (4-n%4)%4) }
