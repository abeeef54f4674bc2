// Command overhead compares the Consumer's cost per message at two commits:
// it builds the root package's test binary at each with the same benchmark
// file, the new commit's overhead_test.go (BenchmarkConsumerOverhead, an
// in-process SQS fake that answers after the stated round trip: no HTTP,
// no client pool), runs the two in interleaved
// rounds (the order alternating each round) and prints, for each case, the
// medians of CPU microseconds and allocations per message and their ratio,
// with the machine's load average before and after.
//
//	go run ./bench/overhead                       # 4303791 against HEAD, 4 rounds
//	go run ./bench/overhead -old main~3 -new HEAD -rounds 6
//	go run ./bench/overhead -bench 'BenchmarkConsumerOverhead/rtt=0s'
//
// Run it from the repository (it uses git worktree) on a quiet machine:
// CPU per message is a process's CPU time over the messages it handled, so
// other load on the machine shows as noise, not as a bias of one side.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

func main() {
	old := flag.String("old", "4303791", "the commit to compare against")
	cur := flag.String("new", "HEAD", "the commit measured")
	rounds := flag.Int("rounds", 4, "interleaved rounds (each runs both binaries once)")
	bench := flag.String("bench", "BenchmarkConsumerOverhead/rtt=10ms", "benchmarks to run (go test -bench)")
	benchtime := flag.String("benchtime", "20000x", "messages per run (go test -benchtime)")
	flag.Parse()
	if *rounds < 1 {
		fail(fmt.Errorf("-rounds %d: must be at least 1", *rounds))
	}
	tmp, err := os.MkdirTemp("", "overhead-ab-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	bench0, err := exec.Command("git", "show", *cur+":overhead_test.go").Output()
	if err != nil {
		fail(fmt.Errorf("reading overhead_test.go at %s: %w", *cur, err))
	}
	bins := map[string]string{}
	for _, side := range []struct{ name, rev string }{{"old", *old}, {"new", *cur}} {
		bin, err := build(tmp, side.name, side.rev, bench0)
		if err != nil {
			fail(fmt.Errorf("building %s (%s): %w", side.name, side.rev, err))
		}
		bins[side.name] = bin
	}
	fmt.Printf("load average before: %s\n", loadavg())
	runs := map[string]map[string][]result{"old": {}, "new": {}}
	var cases []string
	for r := range *rounds {
		order := []string{"old", "new"}
		if r%2 == 1 {
			order = []string{"new", "old"}
		}
		for _, side := range order {
			out, err := exec.Command(bins[side], "-test.run=^$", "-test.bench="+*bench, "-test.benchtime="+*benchtime, "-test.count=1").CombinedOutput()
			if err != nil {
				fail(fmt.Errorf("round %d, %s: %w\n%s", r+1, side, err, out))
			}
			for name, res := range parse(out) {
				if _, seen := runs["old"][name]; !seen && side == order[0] && r == 0 {
					cases = append(cases, name)
				}
				runs[side][name] = append(runs[side][name], res)
			}
		}
	}
	fmt.Printf("load average after:  %s\n\n", loadavg())
	sort.Strings(cases)
	fmt.Printf("medians of %d rounds, %s messages a run; old = %s, new = %s\n", *rounds, *benchtime, *old, *cur)
	fmt.Printf("%-44s %12s %12s %7s %10s %10s\n", "case", "old cpu-µs", "new cpu-µs", "ratio", "old allocs", "new allocs")
	for _, name := range cases {
		o, n := runs["old"][name], runs["new"][name]
		oc, nc := median(o, func(r result) float64 { return r.cpu }), median(n, func(r result) float64 { return r.cpu })
		oa, na := median(o, func(r result) float64 { return r.allocs }), median(n, func(r result) float64 { return r.allocs })
		fmt.Printf("%-44s %12.2f %12.2f %6.2fx %10.1f %10.1f\n", name, oc, nc, nc/oc, oa, na)
	}
}

// result is one benchmark line's figures.
type result struct{ cpu, allocs float64 }

var line = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.*)$`)

// parse reads go test -bench output: each line's cpu-µs/msg and allocs/op.
func parse(out []byte) map[string]result {
	res := map[string]result{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		var r result
		for i := 1; i < len(f); i++ {
			v, err := strconv.ParseFloat(f[i-1], 64)
			if err != nil {
				continue
			}
			switch f[i] {
			case "cpu-µs/msg":
				r.cpu = v
			case "allocs/op":
				r.allocs = v
			}
		}
		res[m[1]] = r
	}
	return res
}

// build compiles the root package's tests at rev, with benchFile as its
// overhead_test.go, into dir and returns the binary's path. At a commit
// from before the benchmark had a file of its own, its bench_test.go (which
// held it, beside benchmarks that need that commit's code) is left out.
func build(dir, name, rev string, benchFile []byte) (string, error) {
	wt := filepath.Join(dir, name)
	if out, err := exec.Command("git", "worktree", "add", "--detach", wt, rev).CombinedOutput(); err != nil {
		return "", fmt.Errorf("git worktree add: %w: %s", err, out)
	}
	defer exec.Command("git", "worktree", "remove", "--force", wt).Run()
	if _, err := os.Stat(filepath.Join(wt, "overhead_test.go")); os.IsNotExist(err) {
		if err := os.Remove(filepath.Join(wt, "bench_test.go")); err != nil && !os.IsNotExist(err) {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(wt, "overhead_test.go"), benchFile, 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name+".test")
	cmd := exec.Command("go", "test", "-c", "-o", bin, ".")
	cmd.Dir = wt
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go test -c: %w: %s", err, out)
	}
	return bin, nil
}

func median(rs []result, f func(result) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "overhead:", err)
	os.Exit(1)
}
