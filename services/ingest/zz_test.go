package ingest_test
import ("fmt";"net/http";"testing";"time";"regexp";"encoding/json";"strings";"strconv";"sort")
func redisCPU(t *testing.T, e *env) float64 {
	info := e.s.Redis.Client().Info(t.Context(), "cpu").Val()
	var sum float64
	for _, k := range []string{"used_cpu_sys", "used_cpu_user"} {
		m := regexp.MustCompile(`(?m)^`+k+`:([0-9.]+)`).FindStringSubmatch(info)
		f, _ := strconv.ParseFloat(strings.TrimSpace(m[1]), 64); sum += f
	}
	return sum
}
func TestZZBulkChecks(t *testing.T){
	e := newEnv(t, nil)
	time.Sleep(2*time.Second)
	st := e.start(t, startBody(e.obsUnit))
	rdb := e.s.Redis.Client()
	rdb.ConfigResetStat(t.Context())
	c0 := redisCPU(t, e)
	for r := 0; r < 50; r++ {
		files := make([]map[string]any, 1000)
		for i := range files { files[i] = fileBody(st.ID, fmt.Sprintf("bench/bulk/%03d/%05d.fits", r, i)) }
		b, _ := json.Marshal(map[string]any{"files": files})
		resp := doURL(t, e.c, http.MethodPost, e.s.URLs["ingest"]+"/raw_data_files/bulk", e.token, b)
		if resp.Status != 201 { t.Fatal(string(resp.Body)) }
	}
	waitDrained(t, e)
	time.Sleep(time.Second)
	c1 := redisCPU(t, e)
	t.Logf("redis CPU per row: %.1f µs", (c1-c0)*1e6/50000)
	cs := rdb.Info(t.Context(), "commandstats").Val()
	lines := regexp.MustCompile(`(?m)^cmdstat_([a-z_|]+):calls=(\d+),usec=(\d+)`).FindAllStringSubmatch(cs, -1)
	sort.Slice(lines, func(i, j int) bool { a, _ := strconv.Atoi(lines[i][3]); b, _ := strconv.Atoi(lines[j][3]); return a > b })
	for _, l := range lines[:min(12, len(lines))] { u, _ := strconv.Atoi(l[3]); t.Logf("%-14s calls %6s  µs/row %.2f", l[1], l[2], float64(u)/50000) }
}
