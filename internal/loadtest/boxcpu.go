package loadtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Box is a sample of where the machine's CPU went, so that a benchmark can
// say which process held the cores during a phase (Linux /proc).
type Box struct {
	Busy, Total time.Duration            // all cores, from /proc/stat
	Procs       map[string]time.Duration // CPU of each watched process tree
	// ticks of each process of each tree, so that Sub counts a process
	// that ended meanwhile (a pool closing an idle connection) as zero,
	// not as minus its whole past
	ticks map[string]map[int]int64
}

// Sub is the CPU spent between s and later (by the processes still there
// at later: what a process that ended in between spent is not counted).
func (s Box) Sub(later Box) Box {
	d := Box{Busy: later.Busy - s.Busy, Total: later.Total - s.Total, Procs: map[string]time.Duration{}}
	for name, procs := range later.ticks {
		var sum int64
		for pid, t := range procs {
			sum += t - s.ticks[name][pid] // a process new since s counts from 0
		}
		d.Procs[name] = ticksToDuration(sum)
	}
	return d
}

// ReadBox samples the machine and the process trees rooted at roots (a
// name for each root pid; a root's children, e.g. Postgres backends, count
// with it). A root of 0 is left out.
func ReadBox(roots map[string]int) (Box, error) {
	b := Box{Procs: map[string]time.Duration{}, ticks: map[string]map[int]int64{}}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return b, fmt.Errorf("read /proc/stat: %w", err)
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	fields := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(fields) < 9 || fields[0] != "cpu" {
		return b, fmt.Errorf("unexpected /proc/stat line %q", line)
	}
	var total, idle int64
	for i, f := range fields[1:9] {
		v, _ := strconv.ParseInt(f, 10, 64)
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	b.Total, b.Busy = ticksToDuration(total), ticksToDuration(total-idle)

	parent, cpu, err := processTable()
	if err != nil {
		return b, err
	}
	for name, root := range roots {
		if root <= 0 {
			continue
		}
		var sum int64
		b.ticks[name] = map[int]int64{}
		for pid, ticks := range cpu {
			if descends(pid, root, parent) {
				sum += ticks
				b.ticks[name][pid] = ticks
			}
		}
		b.Procs[name] = ticksToDuration(sum)
	}
	return b, nil
}

// processTable reads every process's parent and CPU ticks (user + system).
func processTable() (parent map[int]int, cpu map[int]int64, err error) {
	paths, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, nil, fmt.Errorf("list processes: %w", err)
	}
	parent, cpu = map[int]int{}, map[int]int64{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // ended meanwhile
		}
		pid, ppid, ticks, err := parseProcStat(data)
		if err != nil {
			continue
		}
		parent[pid], cpu[pid] = ppid, ticks
	}
	return parent, cpu, nil
}

// parseProcStat reads a /proc/<pid>/stat line: the process, its parent and
// the CPU ticks it used (user + system). The fields are counted after the
// parenthesised command name, which may hold spaces.
func parseProcStat(data []byte) (pid, ppid int, ticks int64, err error) {
	s := string(data)
	open, closing := strings.IndexByte(s, ' '), strings.LastIndexByte(s, ')')
	if open < 0 || closing < 0 || closing+2 > len(s) {
		return 0, 0, 0, fmt.Errorf("malformed /proc stat %q", truncateForError(s))
	}
	f := strings.Fields(s[closing+2:]) // state ppid ... utime(12th) stime(13th)
	if len(f) < 13 {
		return 0, 0, 0, fmt.Errorf("short /proc stat %q", truncateForError(s))
	}
	pid, _ = strconv.Atoi(s[:open])
	ppid, _ = strconv.Atoi(f[1])
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return pid, ppid, utime + stime, nil
}

func truncateForError(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func descends(pid, root int, parent map[int]int) bool {
	for depth := 0; pid > 1 && depth < 64; depth++ {
		if pid == root {
			return true
		}
		pid = parent[pid]
	}
	return false
}

func ticksToDuration(t int64) time.Duration {
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(t) * time.Second / ticks
}
