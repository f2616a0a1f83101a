package main

// Block volumes: a sparse file per volume (<state>/volumes/<id>/disk.img),
// attached to a loop device by NodeStageVolume and detached by
// NodeUnstageVolume (and by DeleteVolume, should one be left). The loop
// device of a file is found by asking each loop device which inode it is
// backed by (LOOP_GET_STATUS64), not by its backing_file path, which differs
// between mount namespaces. Loop devices are made with the loop ioctls, so
// the driver's image needs no losetup.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

const blockFile = "disk.img"

func (s *store) blockPath(id string) string { return filepath.Join(s.dataDir(id), blockFile) }

// createBlockFile makes the volume's backing file of `size` bytes (sparse).
func createBlockFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() < size {
		return f.Truncate(size)
	}
	return nil
}

// findLoop returns the /dev/loopN backed by the file at path ("" when none).
func findLoop(path string) (string, error) {
	var want unix.Stat_t
	if err := unix.Stat(path, &want); err != nil {
		return "", err
	}
	names, err := filepath.Glob("/sys/block/loop*")
	if err != nil {
		return "", err
	}
	for _, sys := range names {
		dev := "/dev/" + filepath.Base(sys)
		info, err := loopStatus(dev)
		if err != nil {
			continue // unbound (ENXIO) or no node for it here
		}
		if info.Inode == want.Ino && info.Device == uint64(want.Dev) {
			return dev, nil
		}
	}
	return "", nil
}

func loopStatus(dev string) (*unix.LoopInfo64, error) {
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return unix.IoctlLoopGetStatus64(fd)
}

// attachLoop binds the file to a free loop device (or returns the one it is
// bound to already).
func attachLoop(path string) (string, error) {
	if dev, err := findLoop(path); err != nil || dev != "" {
		return dev, err
	}
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open /dev/loop-control: %w", err)
	}
	defer unix.Close(ctl)
	file, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(file)
	// Another process may take the free device between the two calls: retry.
	for i := 0; i < 16; i++ {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		if err := ensureLoopNode(dev, n); err != nil {
			return "", err
		}
		fd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		err = unix.IoctlSetInt(fd, unix.LOOP_SET_FD, file)
		if err == nil {
			info := unix.LoopInfo64{}
			copy(info.File_name[:], path)
			_ = unix.IoctlLoopSetStatus64(fd, &info)
		}
		unix.Close(fd)
		if err == nil {
			return dev, nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return "", fmt.Errorf("LOOP_SET_FD %s: %w", dev, err)
		}
	}
	return "", fmt.Errorf("no free loop device for %s", path)
}

// ensureLoopNode makes /dev/loopN where a new loop device has no node yet
// (a container's /dev is a copy made at its start).
func ensureLoopNode(dev string, n int) error {
	if _, err := os.Lstat(dev); err == nil || !errors.Is(err, os.ErrNotExist) {
		return err
	}
	const loopMajor = 7
	return unix.Mknod(dev, unix.S_IFBLK|0o660, int(unix.Mkdev(loopMajor, uint32(n))))
}

// detachLoop frees the loop device bound to the file, if any.
func detachLoop(path string) error {
	dev, err := findLoop(path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && dev == "") {
		return nil
	}
	if err != nil {
		return err
	}
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("LOOP_CLR_FD %s: %w", dev, err)
	}
	return nil
}

// isBlockDevice says whether path itself (never a link's target) is a block device.
func isBlockDevice(path string) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFBLK
}
