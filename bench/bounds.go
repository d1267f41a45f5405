package bench

import (
	"fmt"
	"strings"
)

// measuredMedian returns the median of f over the samples of x that
// measured it (f >= 0), or -1 when none did.
func measuredMedian(x RedisResult, f func(Sample) float64) float64 {
	var xs []float64
	for _, s := range x.Samples {
		if v := f(s); v >= 0 {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return -1
	}
	return Stats(xs).Med
}

// cpuSplit is a contender's median CPU seconds per 100,000 decisions in a
// cell, Redis's and this process's, each -1 when not measured.
type cpuSplit struct{ redis, client float64 }

func splitOf(x RedisResult) cpuSplit {
	return cpuSplit{measuredMedian(x, Sample.CPUPer100k), measuredMedian(x, Sample.ClientCPUPer100k)}
}

func (c cpuSplit) ok() bool { return c.redis > 0 && c.client > 0 }

// allows returns num / den as a ratio, or "–" when either is not measured.
func allows(num, den float64) string {
	if num <= 0 || den <= 0 {
		return "–"
	}
	return fmtRatio(num / den)
}

// writeCPUBounds prints, for every target cell, where floodgate's CPU per
// decision goes and what the cores did, beside the peers' CPU per decision
// and the ratios they allow: a contender bound by one resource decides per
// second at most as many times more than another as it spends less of that
// resource per decision, whatever the code on either side does.
func (r *Report) writeCPUBounds(p *printer) {
	var cells []targetCell
	for _, t := range r.targetCells() {
		if splitOf(t.fg).ok() {
			cells = append(cells, t)
		}
	}
	if len(cells) == 0 {
		return
	}
	p.f("What bounds each cell: CPU seconds per 100,000 decisions of Redis (every node) and of this process (the callers and the client library), and the machine's cores while the callers ran: busy in Redis, busy in this process, idle, and taken by the hypervisor (`/proc/stat`'s steal), medians over the rounds. A contender that fills one resource decides per second at most as many times more than another as it spends less of it per decision: \"Redis allows\" is the peer's Redis CPU per decision over floodgate's (the bound where a Redis server's one core is full: the standalone server, a cluster's hot-key shard), \"machine allows\" the same of Redis and client CPU together (the bound where every core is busy). A cell whose bound is under the target cannot meet it on this machine; one that misses under a bound above it was held back by something else (the cores idle or stolen, a round's noise).")
	p.f("")
	p.f("| backend | workload | callers | floodgate | CPU s/100k: Redis + client | cores: Redis, client, idle, stolen | redis_rate CPU | ulule CPU | Redis allows vs redis_rate, ulule | machine allows vs redis_rate, ulule |")
	p.f("|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, c := range cells {
		fg := splitOf(c.fg)
		var cpus, redisAllows, machineAllows []string
		for _, id := range []string{"redis_rate", "ulule"} {
			x, ok := r.find(c.backend, c.workload, c.conc, id)
			peer := splitOf(x)
			if !ok || !peer.ok() {
				cpus, redisAllows, machineAllows = append(cpus, "–"), append(redisAllows, "–"), append(machineAllows, "–")
				continue
			}
			cpus = append(cpus, fmt.Sprintf("%s + %s", fmtFloat(peer.redis, 2), fmtFloat(peer.client, 2)))
			redisAllows = append(redisAllows, allows(peer.redis, fg.redis))
			machineAllows = append(machineAllows, allows(peer.redis+peer.client, fg.redis+fg.client))
		}
		coreCell := strings.Join([]string{
			fmtFloat(measuredMedian(c.fg, Sample.RedisCores), 2), fmtFloat(measuredMedian(c.fg, Sample.ClientCores), 2),
			fmtFloat(measuredMedian(c.fg, Sample.IdleCores), 2), fmtFloat(measuredMedian(c.fg, Sample.StolenCores), 2),
		}, ", ")
		p.f("| %s | %s | %d | %s | %s + %s | %s | %s | %s | %s | %s |", c.backend, c.workload, c.conc, c.fg.Name,
			fmtFloat(fg.redis, 2), fmtFloat(fg.client, 2), coreCell,
			cpus[0], cpus[1], strings.Join(redisAllows, ", "), strings.Join(machineAllows, ", "))
	}
	p.f("")
}
