// Package resolve turns names into coordinates (POST /sources/resolve, and sources created with
// "resolve": true). Resolution order: coordinate strings and the offline catalogue shipped in
// the binary (Local), then the database's sources and aliases (a Lookup), then, when configured,
// CDS Sesame over HTTP with answers cached in Redis (Sesame).
package resolve

//go:generate go run ./gen -out data

import (
	"bufio"
	_ "embed"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

//go:embed data/catalogue.tsv
var catalogueTSV string

// License is the licence notice of the catalogue's data (d3-celestial, BSD-3-Clause), which
// redistributions must carry.
//
//go:embed data/LICENSE.d3-celestial
var License string

// Object is one entry of a catalogue.
type Object struct {
	Name       string
	RADeg      float64
	DecDeg     float64
	ObjectType string
	Mag        float64
	Reference  string
	Aliases    []string
}

// Local is the offline catalogue: bright stars (to magnitude 6) and Messier objects with their
// names, keyed by a normalised form of every name (Key).
type Local struct {
	objects []Object
	byKey   map[string]int
	// constellations maps every form of a constellation's name (abbreviation, name, genitive;
	// lower case, no spaces) to its abbreviation in lower case.
	constellations map[string]string
}

// NewLocal loads the embedded catalogue.
func NewLocal() (*Local, error) {
	l := &Local{byKey: map[string]int{}, constellations: map[string]string{}}
	sc := bufio.NewScanner(strings.NewReader(catalogueTSV))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		t := sc.Text()
		if t == "" || t[0] == '#' {
			continue
		}
		f := strings.Split(t, "\t")
		switch f[0] {
		case "C":
			if len(f) != 4 {
				return nil, fmt.Errorf("catalogue line %d: want 4 fields", line)
			}
			abbr := strings.ToLower(f[1])
			for _, form := range f[1:] {
				l.constellations[squash(form)] = abbr
			}
		case "O":
			if len(f) != 8 {
				return nil, fmt.Errorf("catalogue line %d: want 8 fields", line)
			}
			ra, err1 := strconv.ParseFloat(f[2], 64)
			dec, err2 := strconv.ParseFloat(f[3], 64)
			mag, err3 := strconv.ParseFloat(f[5], 64)
			if err1 != nil || err2 != nil || err3 != nil {
				return nil, fmt.Errorf("catalogue line %d: bad number", line)
			}
			o := Object{Name: f[1], RADeg: ra, DecDeg: dec, ObjectType: f[4], Mag: mag, Reference: f[6]}
			if f[7] != "" {
				o.Aliases = strings.Split(f[7], "|")
			}
			l.objects = append(l.objects, o)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// Keys after constellations are known. The first object to claim a key keeps it (stars come
	// by HIP number, then Messier objects).
	for i, o := range l.objects {
		for _, n := range append([]string{o.Name}, o.Aliases...) {
			if k := l.Key(n); k != "" {
				if _, taken := l.byKey[k]; !taken {
					l.byKey[k] = i
				}
			}
		}
	}
	return l, nil
}

// Len is the number of objects in the catalogue.
func (l *Local) Len() int { return len(l.objects) }

// Lookup finds a name in the catalogue.
func (l *Local) Lookup(name string) (Object, bool) {
	i, ok := l.byKey[l.Key(name)]
	if !ok {
		return Object{}, false
	}
	return l.objects[i], true
}

// greekWords maps every spelling of a Bayer letter (Greek character, English name, SIMBAD's
// three-letter form) to the three-letter form without its dot.
var greekWords = func() map[string]string {
	m := map[string]string{}
	for _, g := range [][]string{
		{"alf", "alpha", "α", "alp"}, {"bet", "beta", "β"}, {"gam", "gamma", "γ"}, {"del", "delta", "δ"},
		{"eps", "epsilon", "ε"}, {"zet", "zeta", "ζ"}, {"eta", "η"}, {"tet", "theta", "θ", "the"},
		{"iot", "iota", "ι"}, {"kap", "kappa", "κ"}, {"lam", "lambda", "λ", "lmd"}, {"mu", "μ"}, {"nu", "ν"},
		{"ksi", "xi", "ξ"}, {"omi", "omicron", "ο"}, {"pi", "π"}, {"rho", "ρ"}, {"sig", "sigma", "σ"},
		{"tau", "τ"}, {"ups", "upsilon", "υ"}, {"phi", "φ"}, {"chi", "χ"}, {"psi", "ψ"}, {"ome", "omega", "ω"},
	} {
		for _, w := range g {
			m[w] = g[0]
		}
	}
	return m
}()

// catalogueID matches designations by catalogue number: M 31, Messier 31, NGC 0224, IC 434,
// HD 172167, HIP 91262, GJ 721 / Gl 721 (after squashing).
var catalogueID = regexp.MustCompile(`^(m|messier|ngc|ic|hd|hip|gj|gl)0*([0-9]+[a-z]?)$`)

var catalogueAlias = map[string]string{"messier": "m", "gl": "gj"}

// bayerPrefix matches what comes before a constellation: a Greek letter (word or character)
// with an optional component number ("alpha1", "alf01", "α2"), a Flamsteed number, or a short
// Latin letter designation ("b", "A1", "CG", "RR").
var bayerPrefix = regexp.MustCompile(`^([^\d]+?)\.?-?0*(\d*)$`)

// Key is the normalised form of a name under which the catalogue is searched: "M 31", "m31" and
// "Messier 31" give "m31"; "NGC 0224" gives "ngc224"; "alpha Lyrae", "alf Lyr" and "α Lyr" give
// "alflyr"; "3 Lyrae" gives "3lyr"; any other name is lower-cased with everything but letters
// and digits removed ("Andromeda Galaxy" → "andromedagalaxy", "Bode's Galaxy" → "bodesgalaxy").
func (l *Local) Key(name string) string {
	s := strings.ToLower(strings.TrimSpace(name))
	s = strings.TrimPrefix(s, "* ")
	s = strings.TrimPrefix(s, "name ")
	if s == "" {
		return ""
	}
	if m := catalogueID.FindStringSubmatch(squash(s)); m != nil {
		prefix := m[1]
		if a, ok := catalogueAlias[prefix]; ok {
			prefix = a
		}
		return prefix + m[2]
	}
	tokens := strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r == '_' })
	// A designation within a constellation: the last one to three tokens name the constellation.
	for n := 1; n <= 3 && n < len(tokens); n++ {
		abbr, ok := l.constellations[squash(strings.Join(tokens[len(tokens)-n:], ""))]
		if !ok {
			continue
		}
		if p := designation(strings.Join(tokens[:len(tokens)-n], "")); p != "" {
			return p + abbr
		}
	}
	return squash(s)
}

// designation normalises the part of a star name before its constellation, or "" if it is not
// a Bayer, Flamsteed or variable-star designation.
func designation(p string) string {
	if p == "" {
		return ""
	}
	if n, err := strconv.Atoi(p); err == nil && n > 0 { // Flamsteed
		return strconv.Itoa(n)
	}
	m := bayerPrefix.FindStringSubmatch(p)
	if m == nil {
		return ""
	}
	letter, num := m[1], m[2]
	if g, ok := greekWords[letter]; ok {
		return g + num
	}
	if len(letter) <= 2 && isASCIILetters(letter) { // Latin Bayer letters, variable stars (R, RR, CG)
		return letter + num
	}
	return ""
}

func isASCIILetters(s string) bool {
	for _, r := range s {
		if r < 'a' || r > 'z' {
			return false
		}
	}
	return s != ""
}

// squash lower-cases s and keeps only its letters and digits.
func squash(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}
