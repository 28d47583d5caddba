package worker

import (
	"errors"
	"os"
	"strconv"
	"syscall"
)

// LowerPriority gives every thread of this process the scheduling niceness nice (1–19: the higher,
// the lower the priority), so that on a machine the worker shares with the API, acknowledging
// writes goes first and applying them takes what CPU is left: the buffer exists to absorb a burst
// the worker cannot apply at once. Linux keeps a niceness per thread; threads the Go runtime
// starts later inherit it from the thread that starts them, so the threads are listed until no
// new one appears. Raising one's own niceness needs no privilege.
func LowerPriority(nice int) error {
	done := map[int]bool{}
	for {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		added := false
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil || done[tid] {
				continue
			}
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil && !errors.Is(err, syscall.ESRCH) {
				return err
			}
			done[tid], added = true, true
		}
		if !added {
			return nil
		}
	}
}
