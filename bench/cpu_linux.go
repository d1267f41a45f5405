package bench

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHz is the unit of /proc/stat's times: USER_HZ, 100 on every Linux
// architecture Go runs on.
const userHz = 100

// machineCPU returns the time every core of the machine has spent idle
// (idle and iowait) and stolen by the hypervisor since boot, or -1s when
// /proc/stat cannot be read.
func machineCPU() (idle, steal time.Duration) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return -1, -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return -1, -1
	}
	// cpu user nice system idle iowait irq softirq steal ...
	fields := strings.Fields(sc.Text())
	if len(fields) < 9 || fields[0] != "cpu" {
		return -1, -1
	}
	tick := func(i int) time.Duration {
		n, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil {
			return -1
		}
		return time.Duration(n) * (time.Second / userHz) // divided first: no overflow
	}
	idleT, iowait, stealT := tick(4), tick(5), tick(8)
	if idleT < 0 || iowait < 0 || stealT < 0 {
		return -1, -1
	}
	return idleT + iowait, stealT
}
