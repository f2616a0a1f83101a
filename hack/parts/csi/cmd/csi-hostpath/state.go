package main

// Volumes of this driver: a directory per volume under <state>/volumes and a
// JSON record per volume under <state>/meta, so the controller side and the
// node side (the same process, or two processes sharing the state dir) agree
// and a restarted driver knows its volumes again.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
)

// volume IDs are the only request field that becomes a path component here:
// hp-<hex> for provisioned volumes, csi-<hex> for the kubelet's inline
// ephemeral volumes. Anything else is refused before touching the disk.
var volumeIDPattern = regexp.MustCompile(`^(hp|csi)-[0-9a-f]{16,64}$`)

type volumeRecord struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Capacity  int64  `json:"capacity"`
	Ephemeral bool   `json:"ephemeral,omitempty"`
	// The node a ControllerPublishVolume attached it to ("" when not attached).
	AttachedTo string `json:"attachedTo,omitempty"`
	Block      bool   `json:"block,omitempty"`
	// Where NodePublishVolume mounted it, and whether one of those mounts
	// asked for SINGLE_NODE_SINGLE_WRITER (no second target allowed then).
	Targets      []string `json:"targets,omitempty"`
	SingleWriter bool     `json:"singleWriter,omitempty"`
}

type store struct {
	mu   sync.Mutex
	root string
}

func newStore(root string) (*store, error) {
	for _, d := range []string{"volumes", "meta"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o750); err != nil {
			return nil, err
		}
	}
	return &store{root: root}, nil
}

func idForName(name string) string {
	sum := sha256.Sum256([]byte(name))
	return "hp-" + hex.EncodeToString(sum[:16])
}

func validID(id string) bool { return volumeIDPattern.MatchString(id) }

func (s *store) dataDir(id string) string { return filepath.Join(s.root, "volumes", id) }

func (s *store) metaPath(id string) string { return filepath.Join(s.root, "meta", id+".json") }

var errNoVolume = errors.New("volume not found")

// get reads a volume's record; errNoVolume when there is none. Callers hold mu.
func (s *store) get(id string) (*volumeRecord, error) {
	if !validID(id) {
		return nil, errNoVolume
	}
	raw, err := os.ReadFile(s.metaPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errNoVolume
	}
	if err != nil {
		return nil, err
	}
	var v volumeRecord
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("volume record %s: %w", id, err)
	}
	return &v, nil
}

// put writes a record atomically (write, rename: a crash of the driver leaves
// the old record or the new one; no fsync, it is a test driver). Callers hold mu.
func (s *store) put(v *volumeRecord) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := s.metaPath(v.ID) + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	if _, err := f.Write(raw); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, s.metaPath(v.ID))
}

// create makes the volume's directory and record. Callers hold mu.
func (s *store) create(v *volumeRecord) error {
	if err := os.MkdirAll(s.dataDir(v.ID), 0o777); err != nil {
		return err
	}
	// The directory is the volume's root as pods see it: world-writable like a
	// fresh filesystem would be for root-owned pods; fsGroup narrows it.
	if err := os.Chmod(s.dataDir(v.ID), 0o777); err != nil {
		return err
	}
	if v.Block {
		if err := createBlockFile(s.blockPath(v.ID), v.Capacity); err != nil {
			return err
		}
	}
	return s.put(v)
}

// remove deletes the record and the data. The data dir is this driver's own
// (never a path from a request), and removal refuses to cross mounts.
func (s *store) remove(id string) error {
	if err := removeTree(s.dataDir(id)); err != nil {
		return err
	}
	if err := os.Remove(s.metaPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
