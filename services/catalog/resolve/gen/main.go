// Command gen builds the offline name catalogue (../data/catalogue.tsv) from the npm package
// d3-celestial@0.7.35 (BSD-3-Clause, Olaf Frohn): stars to magnitude 6 (data/stars.6.json) with
// their proper, Bayer, Flamsteed, variable-star, Gliese, HD and HIP names (data/starnames.json),
// the Messier objects (data/messier.json) with their NGC/IC numbers and common names
// (data/dsonames.json), and the constellations (data/constellations.json) with their genitives,
// which the resolver's normalisation needs ("alpha Lyrae"). The stars' proper motions (mas/yr,
// mu_alpha* including cos dec, epoch 2000.0 as d3-celestial's positions) come from the Yale Bright
// Star Catalogue, 5th revised ed. (public domain), kept in ../data/bsc5/catalog: each star is
// matched to its BSC5 record by HD number, else by position and magnitude (bsc5.go).
//
// Run it with `go generate ./...` in services/catalog: it fetches the package with `npm pack`
// (or reads -tgz), checks the tarball's SHA-1 against the one npm published, and writes the same
// output for the same input (sorted, fixed formatting), so the committed file can be re-checked.
package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

const (
	pkg     = "d3-celestial@0.7.35"
	tarball = "d3-celestial-0.7.35.tgz"
	// shasum of the tarball as published on the npm registry (npm view d3-celestial@0.7.35 dist.shasum).
	shasum = "bee03f337ac1ae3d32de2c3bd7d7ae4dd27e1e21"
)

func main() {
	tgz := flag.String("tgz", "", "path of "+tarball+" (default: fetch it with npm pack)")
	out := flag.String("out", "data", "output directory")
	flag.Parse()
	if *tgz == "" {
		dir, err := os.MkdirTemp("", "d3c")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		cmd := exec.Command("npm", "pack", pkg, "--pack-destination", dir)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			log.Fatalf("npm pack %s: %v", pkg, err)
		}
		*tgz = filepath.Join(dir, tarball)
	}
	files, err := readTarball(*tgz)
	if err != nil {
		log.Fatal(err)
	}
	bsc, err := readBSC5(filepath.Join(*out, "bsc5", "catalog"))
	if err != nil {
		log.Fatal(err)
	}
	var buf strings.Builder
	if err := build(&buf, files, bsc); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*out, "catalogue.tsv"), []byte(buf.String()), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*out, "LICENSE.d3-celestial"), files["package/LICENSE"], 0o644); err != nil {
		log.Fatal(err)
	}
}

func readTarball(path string) (map[string][]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sum := sha1.Sum(raw)
	if got := hex.EncodeToString(sum[:]); got != shasum {
		return nil, fmt.Errorf("%s: sha1 %s, want %s (npm's published shasum)", path, got, shasum)
	}
	zr, err := gzip.NewReader(strings.NewReader(string(raw)))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	want := map[string]bool{"package/LICENSE": true, "package/data/stars.6.json": true, "package/data/starnames.json": true,
		"package/data/messier.json": true, "package/data/dsonames.json": true, "package/data/constellations.json": true}
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if want[h.Name] {
			if files[h.Name], err = io.ReadAll(tr); err != nil {
				return nil, err
			}
		}
	}
	for name := range want {
		if files[name] == nil {
			return nil, fmt.Errorf("%s missing from %s", name, path)
		}
	}
	return files, nil
}

type point struct {
	Type     string          `json:"type"`
	ID       json.RawMessage `json:"id"`
	Props    map[string]any  `json:"properties"`
	Geometry struct {
		Coordinates [2]float64 `json:"coordinates"`
	} `json:"geometry"`
}

type collection struct {
	Features []point `json:"features"`
}

// greek maps Bayer letters to the three-letter forms SIMBAD uses.
var greek = map[string]string{
	"α": "alf", "β": "bet", "γ": "gam", "δ": "del", "ε": "eps", "ζ": "zet", "η": "eta", "θ": "tet",
	"ι": "iot", "κ": "kap", "λ": "lam", "μ": "mu.", "ν": "nu.", "ξ": "ksi", "ο": "omi", "π": "pi.",
	"ρ": "rho", "σ": "sig", "τ": "tau", "υ": "ups", "φ": "phi", "χ": "chi", "ψ": "psi", "ω": "ome",
}

var dsoTypes = map[string]string{
	"gg": "galaxy cluster", "g": "galaxy", "s": "spiral galaxy", "s0": "lenticular galaxy", "sd": "dwarf spheroidal galaxy",
	"i": "irregular galaxy", "e": "elliptical galaxy", "oc": "open cluster", "gc": "globular cluster", "dn": "dark nebula",
	"bn": "bright nebula", "sfr": "star-forming region", "rn": "reflection nebula", "en": "emission nebula",
	"pn": "planetary nebula", "snr": "supernova remnant", "pos": "asterism",
}

func clean(s string) string {
	s = strings.NewReplacer("\u2009", " ", "\u200e", "", "´", "'", "’", "'", "\t", " ").Replace(s)
	return strings.Join(strings.Fields(s), " ")
}

func ra(lon float64) float64 {
	if lon < 0 {
		lon += 360
	}
	return lon
}

func coord(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }

func build(w *strings.Builder, files map[string][]byte, bsc []bscStar) error {
	fmt.Fprintf(w, "# Offline name catalogue of obsops, generated by services/catalog/resolve/gen from npm %s\n", pkg)
	fmt.Fprintf(w, "# (data by Olaf Frohn, BSD-3-Clause: see LICENSE.d3-celestial) and the stars' proper motions from the\n")
	fmt.Fprintf(w, "# Yale Bright Star Catalogue, 5th revised ed. (Hoffleit & Warren 1991, public domain: see bsc5/README.md).\n")
	fmt.Fprintf(w, "# Do not edit; run go generate.\n")
	fmt.Fprintf(w, "# C<TAB>abbreviation<TAB>name<TAB>genitive | O<TAB>name<TAB>ra_deg<TAB>dec_deg<TAB>object_type<TAB>mag<TAB>reference<TAB>aliases (|)\n")
	fmt.Fprintf(w, "# [<TAB>pm_ra_mas_yr (mu_alpha*, includes cos dec)<TAB>pm_dec_mas_yr<TAB>epoch (Julian year of ra/dec)]\n")

	var cons collection
	if err := json.Unmarshal(files["package/data/constellations.json"], &cons); err != nil {
		return fmt.Errorf("constellations.json: %w", err)
	}
	seen := map[string]bool{}
	var consLines []string
	for _, f := range cons.Features {
		abbr, _ := f.Props["desig"].(string)
		name, _ := f.Props["name"].(string)
		gen, _ := f.Props["gen"].(string)
		if seen[abbr] {
			continue // Serpens comes twice (Caput, Cauda)
		}
		seen[abbr] = true
		consLines = append(consLines, fmt.Sprintf("C\t%s\t%s\t%s\n", abbr, clean(name), clean(gen)))
	}
	sort.Strings(consLines)
	for _, l := range consLines {
		w.WriteString(l)
	}

	// Stars to magnitude 6, by HIP number.
	var stars collection
	if err := json.Unmarshal(files["package/data/stars.6.json"], &stars); err != nil {
		return fmt.Errorf("stars.6.json: %w", err)
	}
	var names map[string]map[string]any
	if err := json.Unmarshal(files["package/data/starnames.json"], &names); err != nil {
		return fmt.Errorf("starnames.json: %w", err)
	}
	sort.Slice(stars.Features, func(i, j int) bool { return hip(stars.Features[i]) < hip(stars.Features[j]) })
	motions, err := joinBSC5(stars.Features, names, bsc)
	if err != nil {
		return err
	}
	for _, f := range stars.Features {
		h := hip(f)
		n := names[strconv.Itoa(h)]
		str := func(k string) string { s, _ := n[k].(string); return clean(s) }
		con := str("c")
		var aliases []string
		add := func(s string) {
			if s != "" && !contains(aliases, s) {
				aliases = append(aliases, s)
			}
		}
		add(str("name"))
		if b := str("bayer"); b != "" && con != "" {
			letter, digits := splitDigits(b)
			if g, ok := greek[letter]; ok {
				add(g + digits + " " + con)
			} else if len([]rune(letter)) == 1 && letter != "?" {
				add(b + " " + con)
			}
		}
		if fl := str("flam"); fl != "" && con != "" {
			add(fl + " " + con)
		}
		if v := str("var"); v != "" && con != "" {
			add(v + " " + con)
		}
		add(str("gl"))
		add(str("hd"))
		add(fmt.Sprintf("HIP %d", h))
		mag, _ := f.Props["mag"].(float64)
		ref, pm := fmt.Sprintf("%s HIP %d", pkg, h), ""
		if b, ok := motions[h]; ok {
			ref += fmt.Sprintf(", pm BSC5 HR %d", b.hr)
			pm = fmt.Sprintf("\t%d\t%d\t2000.0", b.pmRA, b.pmDec)
		}
		fmt.Fprintf(w, "O\t%s\t%s\t%s\tstar\t%.2f\t%s\t%s%s\n", aliases[0], coord(ra(f.Geometry.Coordinates[0])),
			coord(f.Geometry.Coordinates[1]), mag, ref, strings.Join(aliases[1:], "|"), pm)
	}

	// Messier objects with NGC/IC numbers and common names.
	var messier collection
	if err := json.Unmarshal(files["package/data/messier.json"], &messier); err != nil {
		return fmt.Errorf("messier.json: %w", err)
	}
	var dsonames map[string]map[string]any
	if err := json.Unmarshal(files["package/data/dsonames.json"], &dsonames); err != nil {
		return fmt.Errorf("dsonames.json: %w", err)
	}
	sort.Slice(messier.Features, func(i, j int) bool { return messierNumber(messier.Features[i]) < messierNumber(messier.Features[j]) })
	for _, f := range messier.Features {
		var id string
		_ = json.Unmarshal(f.ID, &id)
		str := func(k string) string { s, _ := f.Props[k].(string); return clean(s) }
		var aliases []string
		add := func(s string) {
			if s != "" && !contains(aliases, s) {
				aliases = append(aliases, s)
			}
		}
		add(id)
		for _, d := range expandDesig(str("desig")) {
			add(d)
			if dn, ok := dsonames[d]; ok {
				if s, _ := dn["name"].(string); s != "" {
					add(clean(s))
				}
			}
		}
		add(str("alt"))
		typ := dsoTypes[str("type")]
		if typ == "" {
			typ = str("type")
		}
		mag, _ := f.Props["mag"].(float64)
		fmt.Fprintf(w, "O\t%s\t%s\t%s\t%s\t%.2f\t%s messier.json %s\t%s\n", aliases[0], coord(ra(f.Geometry.Coordinates[0])),
			coord(f.Geometry.Coordinates[1]), typ, mag, pkg, id, strings.Join(aliases[1:], "|"))
	}
	return nil
}

func hip(f point) int {
	n, _ := strconv.Atoi(string(f.ID))
	return n
}

func messierNumber(f point) int {
	var id string
	_ = json.Unmarshal(f.ID, &id)
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "M"))
	return n
}

// expandDesig turns "NGC 5194/5" into NGC 5194 and NGC 5195, "NGC 650/1" into NGC 650 and NGC 651.
func expandDesig(d string) []string {
	if d == "" {
		return nil
	}
	first, second, ok := strings.Cut(d, "/")
	if !ok {
		return []string{d}
	}
	out := []string{first}
	i := strings.LastIndexAny(first, " ")
	num := first[i+1:]
	if len(second) < len(num) {
		out = append(out, first[:i+1]+num[:len(num)-len(second)]+second)
	}
	return out
}

func splitDigits(s string) (string, string) {
	i := strings.IndexAny(s, "0123456789")
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
