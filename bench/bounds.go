package bench

import (
	"fmt"
	"strings"
)

// totalCPU100k is a sample's CPU seconds per 100,000 decisions, Redis's
// and this process's together, or -1 when either is not measured.
func totalCPU100k(s Sample) float64 {
	rc, cc := s.CPUPer100k(), s.ClientCPUPer100k()
	if rc < 0 || cc < 0 {
		return -1
	}
	return rc + cc
}

// writeCPUBounds prints, for every target cell, where floodgate's CPU per
// decision goes and what the cores did, beside the peers' CPU per decision
// and the ratios they allow: a contender bound by one resource decides per
// second at most as many times more than another as it spends less of that
// resource per decision, whatever the code on either side does.
func (r *Report) writeCPUBounds(p *printer) {
	backends, workloads, _ := r.cells()
	type cell struct {
		b, w string
		c    int
		fg   RedisResult
	}
	var cells []cell
	for _, b := range backends {
		for _, w := range workloads {
			for _, c := range TargetConcurrencies {
				for _, id := range []string{"fg-tb", "fg-swl"} {
					if fg, ok := r.find(b, w, c, id); ok && fg.Of(totalCPU100k).Med >= 0 {
						cells = append(cells, cell{b, w, c, fg})
					}
				}
			}
		}
	}
	if len(cells) == 0 {
		return
	}
	p.f("What bounds each cell: CPU seconds per 100,000 decisions of Redis (every node) and of this process (the callers and the client library), and the machine's %d cores over the run: busy in Redis, busy in this process, idle, and taken by the hypervisor (`/proc/stat`'s steal), medians over the rounds. A contender that fills one resource decides per second at most as many times more than another as it spends less of it per decision: \"Redis allows\" is the peer's Redis CPU per decision over floodgate's (the bound where a Redis server's one core is full: the standalone server, a cluster's hot-key shard), \"machine allows\" the same of Redis and client CPU together (the bound where every core is busy). A cell whose bound is under the target cannot meet it on this machine; one that misses under a bound above it was held back by something else (the cores idle or stolen, a round's noise).", r.Meta.CPUs)
	p.f("")
	p.f("| backend | workload | callers | floodgate | CPU s/100k: Redis + client | cores: Redis, client, idle, stolen | redis_rate CPU | ulule CPU | Redis allows vs redis_rate, ulule | machine allows vs redis_rate, ulule |")
	p.f("|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
	med := func(x RedisResult, f func(Sample) float64) float64 { return x.Of(f).Med }
	for _, c := range cells {
		fgRedis, fgTotal := med(c.fg, cpu100k), med(c.fg, totalCPU100k)
		var cpus, redisAllows, machineAllows []string
		for _, id := range []string{"redis_rate", "ulule"} {
			x, ok := r.find(c.b, c.w, c.c, id)
			if !ok || med(x, totalCPU100k) < 0 {
				cpus, redisAllows, machineAllows = append(cpus, "–"), append(redisAllows, "–"), append(machineAllows, "–")
				continue
			}
			cpus = append(cpus, fmt.Sprintf("%s + %s", fmtFloat(med(x, cpu100k), 2), fmtFloat(med(x, clientCPU), 2)))
			redisAllows = append(redisAllows, fmtRatio(med(x, cpu100k)/fgRedis))
			machineAllows = append(machineAllows, fmtRatio(med(x, totalCPU100k)/fgTotal))
		}
		coreCell := strings.Join([]string{
			fmtFloat(med(c.fg, Sample.RedisCores), 2), fmtFloat(med(c.fg, Sample.ClientCores), 2),
			fmtFloat(med(c.fg, Sample.IdleCores), 2), fmtFloat(med(c.fg, Sample.StolenCores), 2),
		}, ", ")
		p.f("| %s | %s | %d | %s | %s + %s | %s | %s | %s | %s | %s |", c.b, c.w, c.c, c.fg.Name,
			fmtFloat(fgRedis, 2), fmtFloat(med(c.fg, clientCPU), 2), coreCell,
			cpus[0], cpus[1], strings.Join(redisAllows, ", "), strings.Join(machineAllows, ", "))
	}
	p.f("")
}
