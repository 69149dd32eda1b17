package walog

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ErrInUse is returned by Open when another process has the log open.
var ErrInUse = errors.New("walog: log in use by another process")

// lockFile creates (if needed) and flocks the lock file at path, so that
// two servers never append to one log. The lock goes with the process: a
// crash releases it, and no stale lock file can block a restart.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("walog: open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked (is another locking-center running on this DATA_PATH?)", ErrInUse, path)
		}
		return nil, fmt.Errorf("walog: lock %s: %w", path, err)
	}
	return f, nil
}

func unlockFile(f *os.File) {
	if f != nil {
		f.Close() // closing the descriptor drops the flock
	}
}
