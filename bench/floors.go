package bench

// FloorRow is one floodgate algorithm's Redis CPU per decision against its
// command floor and the no-op floor, in one cell.
type FloorRow struct {
	Backend, Workload string
	Concurrency       int
	Contender         string
	CPU, Floor, NoOp  float64 // Redis CPU seconds per 100k decisions (medians)
}

// Ratio is the algorithm's CPU over its command floor's.
func (f FloorRow) Ratio() float64 { return f.CPU / f.Floor }

// FloorVerdicts compares floodgate's token bucket and sliding-window log
// with the scripts that run only their commands, in every random-key cell
// at the target concurrencies (on one hot key the real scripts mostly deny
// and write nothing, while the floors always write).
func (r *Report) FloorVerdicts() []FloorRow {
	backends, workloads, _ := r.cells()
	var rows []FloorRow
	for _, b := range backends {
		for _, w := range workloads {
			if w != "random" {
				continue
			}
			for _, c := range TargetConcurrencies {
				for _, fgID := range []string{"fg-tb", "fg-swl"} {
					fg, ok1 := r.find(b, w, c, fgID)
					fl, ok2 := r.find(b, w, c, CommandFloors[fgID])
					if !ok1 || !ok2 || fl.Of(cpu100k).Med <= 0 {
						continue
					}
					row := FloorRow{Backend: b, Workload: w, Concurrency: c, Contender: fg.Name, CPU: fg.Of(cpu100k).Med, Floor: fl.Of(cpu100k).Med, NoOp: -1}
					if n, ok := r.find(b, w, c, "floor"); ok {
						row.NoOp = n.Of(cpu100k).Med
					}
					rows = append(rows, row)
				}
			}
		}
	}
	return rows
}

// writeFloors writes the table of FloorVerdicts.
func (r *Report) writeFloors(p *printer) {
	rows := r.FloorVerdicts()
	if len(rows) == 0 {
		return
	}
	p.f("Redis CPU per decision against the floors, random keys: each algorithm's own command floor runs exactly the Redis commands its script runs to admit (token bucket: `TIME`, `GET`, `SET ... PX`; sliding-window log: `TIME`, `ZREMRANGEBYSCORE`, `ZCARD`, `ZADD NX`, `PEXPIRE`) with no arithmetic and no branches, through the same client; the no-op floor runs none. What the algorithm costs over its command floor is its arithmetic, its argument checks and its reply.")
	p.f("")
	p.f("| backend | callers | floodgate | Redis CPU s/100k | command floor s/100k | ratio | no-op floor s/100k | verdict |")
	p.f("|---|---|---|---:|---:|---:|---:|---|")
	for _, f := range rows {
		p.f("| %s | %d | %s | %s | %s | %s | %s | %s |", f.Backend, f.Concurrency, f.Contender, fmtFloat(f.CPU, 2), fmtFloat(f.Floor, 2), fmtRatio(f.Ratio()), fmtFloat(f.NoOp, 2), yes(f.Ratio() <= TargetVsFloor))
	}
	p.f("")
}
