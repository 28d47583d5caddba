package catalog_test

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// votableSchema is the VOTable 1.4 XSD Debian's python3-astropy ships (make test installs it).
const votableSchema = "/usr/lib/python3/dist-packages/astropy/io/votable/data/VOTable.v1.4.xsd"

// targetList is a small target list as an astronomer writes it: degrees and sexagesimal, proper
// motion with parallax and radial velocity, a planet, a constant-elevation field, aliases.
const targetList = `name,ra,dec,epoch,pmra,pmdec,parallax,rv,kind,body,elevation_deg,az_min_deg,az_max_deg,object_type,aliases
tbl-Orion KL,05:35:14.16,-05:22:21.5,,,,,,,,,,,HII region,tbl-OMC1;tbl-Orion BN/KL
tbl-Sgr B2(N),17h47m19.9s,-28d22m17s,,,,,,,,,,,Molecular cloud,
tbl-IRC+10216,146.989193,13.278768,2000,35,12,7.5,-26.5,fixed,,,,,Carbon star,"tbl-CW Leo"
tbl-Arp 220,233.738,23.503,,,,,5434,,,,,,Galaxy,
tbl-Saturn,,,,,,,,,saturn,,,,,
tbl-Sky dip,,,,,,,,,,45,0,360,,
`

// upload posts body to path with a content type and a bearer credential.
func (e *env) upload(t *testing.T, path, contentType, bearer string, body []byte) response {
	return e.send(t, http.MethodPost, path, "Content-Type", contentType, bearer, body)
}

// get reads path with an Accept header.
func (e *env) get(t *testing.T, path, accept, bearer string) response {
	return e.send(t, http.MethodGet, path, "Accept", accept, bearer, nil)
}

// send is a request through the gateway with one header besides the bearer credential.
func (e *env) send(t *testing.T, method, path, header, value, bearer string, body []byte) response {
	t.Helper()
	req, err := http.NewRequest(method, e.gw(path), bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set(header, value)
	req.Header.Set("Authorization", "Bearer "+bearer)
	res, err := e.c.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

type importResult struct {
	DryRun  bool `json:"dry_run"`
	Created int  `json:"created"`
	Sources []struct {
		Row  int    `json:"row"`
		Name string `json:"name"`
		ID   *int64 `json:"id"`
	} `json:"sources"`
	Existing []struct {
		Row      int    `json:"row"`
		Name     string `json:"name"`
		SourceID int64  `json:"source_id"`
	} `json:"existing"`
}

// TestTablesInAndOut: a target list goes in as CSV or VOTable and comes out again the same, the
// VOTable is valid against the IVOA schema and reads in astropy, and every refusal names its row
// and column with nothing stored.
func TestTablesInAndOut(t *testing.T) {
	e := startEnv(t, nil)
	countTbl := func() int {
		var n int
		require.NoError(t, e.db.QueryRow(`SELECT count(*) FROM sources WHERE name LIKE 'tbl-%'`).Scan(&n))
		return n
	}

	// Refusals first, each naming row and column, none storing anything.
	bad := strings.Replace(targetList, "17h47m19.9s", "17h99m19.9s", 1)
	requireProblem(t, e.upload(t, "/sources/import", "text/csv", e.observer, []byte(bad)), http.StatusUnprocessableEntity, "body.rows[2].ra_deg")
	bad = strings.Replace(targetList, ",7.5,", ",-3,", 1)
	requireProblem(t, e.upload(t, "/sources/import", "text/csv", e.observer, []byte(bad)), http.StatusUnprocessableEntity, "body.rows[3].parallax_mas")
	bad = strings.Replace(targetList, "object_type,aliases", "object_type,notes", 1)
	p := requireProblem(t, e.upload(t, "/sources/import", "text/csv", e.observer, []byte(bad)), http.StatusUnprocessableEntity, "body.columns[14]")
	require.Contains(t, p.Errors[0].Message, `unknown column "notes"`)
	bad = targetList + "tbl-omc1,1,1,,,,,,,,,,,,\n"
	p = requireProblem(t, e.upload(t, "/sources/import", "text/csv", e.observer, []byte(bad)), http.StatusUnprocessableEntity, "body.rows[7].name")
	require.Contains(t, p.Errors[0].Message, "row 1", "names the other row")
	bad = strings.Replace(targetList, "tbl-Saturn,,,,,,,,,saturn", "tbl-Saturn,,,,,,,,,pluto", 1)
	requireProblem(t, e.upload(t, "/sources/import", "text/csv", e.observer, []byte(bad)), http.StatusUnprocessableEntity, "body.rows[5].body")
	requireProblem(t, e.upload(t, "/sources/import", "application/json", e.observer, []byte(targetList)), http.StatusUnprocessableEntity, "header.Content-Type")
	require.Equal(t, http.StatusForbidden, e.upload(t, "/sources/import", "text/csv", e.viewer, []byte(targetList)).Status, "viewers do not import")
	var huge strings.Builder
	huge.WriteString("name,ra,dec\n")
	for i := range 10001 {
		fmt.Fprintf(&huge, "tbl-huge-%d,%g,%g\n", i, float64(i%360), 0.0)
	}
	requireProblem(t, e.upload(t, "/sources/import", "text/csv", e.observer, []byte(huge.String())), http.StatusUnprocessableEntity, "body")
	require.Zero(t, countTbl(), "a refused import stores nothing")

	// A dry run answers what would be created, stores nothing.
	var res importResult
	r := e.upload(t, "/sources/import?dry_run=true", "text/csv", e.observer, []byte(targetList))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &res)
	require.True(t, res.DryRun)
	require.Equal(t, 6, res.Created)
	require.Nil(t, res.Sources[0].ID)
	require.Zero(t, countTbl())

	// The import: all six, sexagesimal read as hours and degrees.
	r = e.upload(t, "/sources/import", "text/csv; charset=utf-8", e.observer, []byte(targetList))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &res)
	require.Equal(t, 6, res.Created)
	require.Equal(t, 6, countTbl())
	var ra, dec float64
	require.NoError(t, e.db.QueryRow(`SELECT ra_deg, dec_deg FROM sources WHERE name = 'tbl-Orion KL'`).Scan(&ra, &dec))
	require.InDelta(t, 15*(5+35/60.0+14.16/3600), ra, 1e-9)
	require.InDelta(t, -(5 + 22/60.0 + 21.5/3600), dec, 1e-9)
	var plx, rv float64
	require.NoError(t, e.db.QueryRow(`SELECT parallax_mas, radial_velocity_kms FROM sources WHERE name = 'tbl-IRC+10216'`).Scan(&plx, &rv))
	require.Equal(t, []float64{7.5, -26.5}, []float64{plx, rv})

	// The same names again: 422 naming each row, nothing stored; the dry run lists them as existing.
	p = requireProblem(t, e.upload(t, "/sources/import", "text/csv", e.observer, []byte(targetList)), http.StatusUnprocessableEntity, "body.rows[1].name")
	require.Len(t, p.Errors, 6)
	r = e.upload(t, "/sources/import?dry_run=true", "text/csv", e.observer, []byte(targetList))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &res)
	require.Equal(t, 0, res.Created)
	require.Len(t, res.Existing, 6)
	require.Equal(t, 6, countTbl())

	// Out as CSV (format= and Accept alike) and VOTable.
	csv1 := e.get(t, "/sources/?q=tbl-&limit=10000&format=csv", "", e.viewer)
	require.Equal(t, http.StatusOK, csv1.Status, "%s", csv1.Body)
	require.True(t, strings.HasPrefix(csv1.Header.Get("Content-Type"), "text/csv"))
	require.Equal(t, "6", csv1.Header.Get("X-Total-Count"))
	require.Equal(t, string(csv1.Body), string(e.get(t, "/sources/?q=tbl-&limit=10000", "text/csv", e.viewer).Body))
	requireProblem(t, e.get(t, "/sources/?q=tbl-&limit=10000", "application/json", e.viewer), http.StatusUnprocessableEntity, "query.limit")
	vot := e.get(t, "/sources/?q=tbl-&limit=10000", "application/x-votable+xml", e.viewer)
	require.Equal(t, http.StatusOK, vot.Status, "%s", vot.Body)
	require.True(t, strings.HasPrefix(vot.Header.Get("Content-Type"), "application/x-votable+xml"))
	checkVOTable(t, vot.Body, 6)

	// Round trips: export → delete → import the export → export again: the same rows but ids
	// and timestamps, through CSV and through VOTable.
	for _, f := range []struct{ format, media string }{{"csv", "text/csv"}, {"votable", "application/x-votable+xml"}} {
		export := e.get(t, "/sources/?q=tbl-&limit=10000&format="+f.format, "", e.viewer)
		require.Equal(t, http.StatusOK, export.Status)
		before := e.get(t, "/sources/?q=tbl-&limit=10000&format=csv", "", e.viewer).Body
		_, err := e.db.Exec(`DELETE FROM sources WHERE name LIKE 'tbl-%'`)
		require.NoError(t, err)
		r := e.upload(t, "/sources/import", f.media, e.observer, export.Body)
		require.Equal(t, http.StatusOK, r.Status, "%s: %s", f.format, r.Body)
		after := e.get(t, "/sources/?q=tbl-&limit=10000&format=csv", "", e.viewer).Body
		require.Equal(t, withoutIDsAndTimes(t, before), withoutIDsAndTimes(t, after), "%s round trip", f.format)
	}

	// A program's obs units as a table, with their sources' columns.
	var orionID, arpID int64
	require.NoError(t, e.db.QueryRow(`SELECT id FROM sources WHERE name = 'tbl-Orion KL'`).Scan(&orionID))
	require.NoError(t, e.db.QueryRow(`SELECT id FROM sources WHERE name = 'tbl-Arp 220'`).Scan(&arpID))
	r = e.call(t, http.MethodPost, e.gw("/observing_program/"), e.observer, map[string]any{
		"short_name": "TBL-1", "title": "Tables", "pi": "O. Scar", "obs_units": []map[string]any{
			{"name": "orion", "source_id": orionID, "instrument_module_id": 11, "duration_s": 3600, "priority": 1},
			{"name": "arp", "source_id": arpID, "instrument_module_id": 11, "duration_s": 1800}}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var prog struct {
		ID int64 `json:"id"`
	}
	r.JSON(t, &prog)
	pc := e.get(t, fmt.Sprintf("/observing_program/%d?format=csv", prog.ID), "", e.viewer)
	require.Equal(t, http.StatusOK, pc.Status, "%s", pc.Body)
	rows := readCSV(t, pc.Body)
	require.Len(t, rows, 3)
	col := index(rows[0])
	require.Equal(t, "orion", rows[1][col["obs_unit"]])
	require.Equal(t, "tbl-Orion KL", rows[1][col["name"]])
	require.NotEmpty(t, rows[1][col["ra_deg"]])
	checkVOTable(t, e.get(t, fmt.Sprintf("/observing_program/%d", prog.ID), "application/x-votable+xml", e.viewer).Body, 2)
	require.True(t, strings.HasPrefix(e.get(t, fmt.Sprintf("/observing_program/%d", prog.ID), "", e.viewer).Header.Get("Content-Type"), "application/json"))

	// Visibility and the heatmap in CSV.
	vc := e.get(t, fmt.Sprintf("/visibility/%d?start=2026-12-01T00:00:00Z&end=2026-12-02T00:00:00Z&step_s=3600&format=csv", orionID), "", e.viewer)
	require.Equal(t, http.StatusOK, vc.Status, "%s", vc.Body)
	rows = readCSV(t, vc.Body)
	require.Len(t, rows, 26, "a header and 25 hourly samples")
	require.Equal(t, []string{"time_utc", "alt_deg", "az_deg", "airmass", "sun_sep_deg", "observable"}, rows[0])
	require.Equal(t, "2026-12-01T00:00:00Z", rows[1][0])
	hc := e.get(t, fmt.Sprintf("/visibility/heatmap?year=2027&source_ids=%d&format=csv", orionID), "", e.viewer)
	require.Equal(t, http.StatusOK, hc.Status, "%s", hc.Body)
	rows = readCSV(t, hc.Body)
	require.Len(t, rows, 366, "a header and one row per day of 2027")
	require.Equal(t, "2027-01-01", rows[1][2])

	// The most one import takes, 10,000 rows, in one request (the time is make bench's figure).
	var big strings.Builder
	big.WriteString("name,ra_deg,dec_deg,pm_ra_mas_yr,pm_dec_mas_yr,aliases\n")
	for i := range 10000 {
		fmt.Fprintf(&big, "tbl-big-%05d,%.6f,%.6f,1.5,-2,tbl-alias-%05d\n", i, float64(i)*0.036, -60+float64(i)*0.012, i)
	}
	start := time.Now()
	r = e.upload(t, "/sources/import", "text/csv", e.observer, []byte(big.String()))
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	t.Logf("imported 10,000 rows in %v", time.Since(start))
	require.Equal(t, 10006, countTbl())
}

// checkVOTable validates a VOTable against the IVOA 1.4 schema with xmllint and reads it with
// astropy.io.votable, expecting rows rows.
func checkVOTable(t *testing.T, body []byte, rows int) {
	t.Helper()
	_, errX := exec.LookPath("xmllint")
	_, errS := os.Stat(votableSchema)
	if errX != nil || errS != nil {
		t.Skip("xmllint (libxml2-utils) or python3-astropy's VOTable schema missing: make test installs them")
	}
	f := filepath.Join(t.TempDir(), "table.vot")
	require.NoError(t, os.WriteFile(f, body, 0o600))
	out, err := exec.Command("xmllint", "--noout", "--schema", votableSchema, f).CombinedOutput()
	require.NoError(t, err, "xmllint: %s\n%s", out, body)
	out, err = exec.Command("/usr/bin/python3", "-W", "error", "-c", `
import sys
from astropy.io.votable import parse
t = parse(sys.argv[1], verify="exception").get_first_table().to_table()
print(len(t))
`, f).CombinedOutput()
	require.NoError(t, err, "astropy: %s", out)
	require.Equal(t, fmt.Sprint(rows), strings.TrimSpace(string(out)))
}

func readCSV(t *testing.T, b []byte) [][]string {
	t.Helper()
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	require.NoError(t, err)
	return rows
}

func index(header []string) map[string]int {
	m := map[string]int{}
	for i, h := range header {
		m[h] = i
	}
	return m
}

// withoutIDsAndTimes is a CSV export's rows without id, created_at and updated_at, sorted.
func withoutIDsAndTimes(t *testing.T, b []byte) []string {
	t.Helper()
	rows := readCSV(t, b)
	col := index(rows[0])
	var out []string
	for _, r := range rows[1:] {
		r[col["id"]], r[col["created_at"]], r[col["updated_at"]] = "", "", ""
		out = append(out, strings.Join(r, "|"))
	}
	sort.Strings(out)
	return out
}
