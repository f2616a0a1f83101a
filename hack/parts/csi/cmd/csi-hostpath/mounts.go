package main

// Bind mounts with the mount(2) system call (no mount binary in the image)
// and the mount table from /proc/self/mountinfo.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space, ...).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isMountPoint reports whether something is mounted exactly at path. statx's
// STATX_ATTR_MOUNT_ROOT answers without reading the mount table (Linux 5.8+:
// reading /proc/self/mountinfo costs a walk of every mount, per call); the
// table is the fallback where the attribute is not supported. The last
// component is not followed: a link there is no mount point.
func isMountPoint(path string) (bool, error) {
	var stx unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, 0, &stx)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err == nil && stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
	}
	return isMountPointByTable(path)
}

func isMountPointByTable(path string) (bool, error) {
	clean, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	if resolved, err := filepath.EvalSymlinks(clean); err == nil {
		clean = resolved
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMountinfo(fields[4]) == clean {
			return true, nil
		}
	}
	return false, sc.Err()
}

// bindMount mounts source at target, read-only when asked (a bind mount only
// becomes read-only through a second, remounting call).
func bindMount(source, target string, readOnly bool, options []string) error {
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s at %s: %w", source, target, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT)
	remount := readOnly
	for _, o := range options {
		switch o {
		case "ro":
			flags |= unix.MS_RDONLY
			remount = true
		case "noexec":
			flags |= unix.MS_NOEXEC
			remount = true
		case "nosuid":
			flags |= unix.MS_NOSUID
			remount = true
		case "nodev":
			flags |= unix.MS_NODEV
			remount = true
		}
	}
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	if remount {
		if err := unix.Mount("", target, "", flags, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return fmt.Errorf("remount %s with %v: %w", target, options, err)
		}
	}
	return nil
}

// unmountIfMounted unmounts path (every stacked mount on it) when mounted.
func unmountIfMounted(path string) error {
	for i := 0; i < 16; i++ {
		mounted, err := isMountPoint(path)
		if err != nil || !mounted {
			return err
		}
		if err := unix.Unmount(path, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	return fmt.Errorf("%s is still mounted after 16 unmounts", path)
}

// removeTree removes a directory tree of this driver's own, refusing to
// descend into anything mounted under it and never following symlinks.
func removeTree(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return os.Remove(path)
	}
	if mounted, err := isMountPoint(path); err != nil {
		return err
	} else if mounted {
		return fmt.Errorf("%s is a mount point: not removing it", path)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := removeTree(filepath.Join(path, e.Name())); err != nil {
			return err
		}
	}
	return os.Remove(path)
}

// usage sums the bytes and inodes under a volume's data dir without following
// links or crossing into other mounts; it stops counting after limit entries.
func usage(path string, limit int) (bytes int64, inodes int64, err error) {
	var root unix.Stat_t
	if err := unix.Lstat(path, &root); err != nil {
		return 0, 0, err
	}
	stack := []string{path}
	for len(stack) > 0 && inodes < int64(limit) {
		dir := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			var st unix.Stat_t
			p := filepath.Join(dir, e.Name())
			if unix.Lstat(p, &st) != nil {
				continue
			}
			inodes++
			bytes += st.Blocks * 512
			if st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Dev == root.Dev {
				stack = append(stack, p)
			}
		}
	}
	return bytes + root.Blocks*512, inodes + 1, nil
}
