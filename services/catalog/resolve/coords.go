package resolve

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

var (
	decimalPair = regexp.MustCompile(`^([+-]?\d+(?:\.\d*)?)\s*[,;\s]\s*([+-]?\d+(?:\.\d*)?)$`)
	// sexagesimalPair: "18h36m56.3s +38d47m01s", "18:36:56.3 +38:47:01", "18 36 56.3 +38 47 01.2",
	// "05h35m14.1s -05°22'30\"".
	sexagesimalPair = regexp.MustCompile(`^(\d{1,2})\s*[h:\s]\s*(\d{1,2})\s*[m:'\s]\s*(\d{1,2}(?:\.\d*)?)\s*s?\s*[,;]?\s*` +
		`([+-]?)\s*(\d{1,2})\s*[d°:\s]\s*(\d{1,2})\s*[m:'′\s]\s*(\d{1,2}(?:\.\d*)?)\s*(?:s|"|″|'')?$`)
)

// ParseCoordinates reads an ICRS position written as two decimal numbers in degrees
// ("279.234 38.784", "279.234, +38.784") or in sexagesimal hours and degrees
// ("18h36m56.3s +38d47m01s", "18:36:56.3 +38:47:01"). ok is false when s is not a coordinate
// string; err is set when it is one but out of range.
func ParseCoordinates(s string) (ra, dec float64, ok bool, err error) {
	s = strings.TrimSpace(s)
	if m := decimalPair.FindStringSubmatch(s); m != nil {
		ra, _ = strconv.ParseFloat(m[1], 64)
		dec, _ = strconv.ParseFloat(m[2], 64)
		return ra, dec, true, checkRange(ra, dec)
	}
	if m := sexagesimalPair.FindStringSubmatch(strings.ToLower(s)); m != nil {
		h, _ := strconv.ParseFloat(m[1], 64)
		mi, _ := strconv.ParseFloat(m[2], 64)
		se, _ := strconv.ParseFloat(m[3], 64)
		d, _ := strconv.ParseFloat(m[5], 64)
		am, _ := strconv.ParseFloat(m[6], 64)
		as, _ := strconv.ParseFloat(m[7], 64)
		if mi >= 60 || se >= 60 || am >= 60 || as >= 60 {
			return 0, 0, true, fmt.Errorf("minutes and seconds must be below 60")
		}
		ra = 15 * (h + mi/60 + se/3600)
		dec = d + am/60 + as/3600
		if m[4] == "-" {
			dec = -dec
		}
		return ra, dec, true, checkRange(ra, dec)
	}
	return 0, 0, false, nil
}

func checkRange(ra, dec float64) error {
	if ra < 0 || ra >= 360 {
		return fmt.Errorf("RA %g is outside [0, 360)", ra)
	}
	if dec < -90 || dec > 90 {
		return fmt.Errorf("Dec %g is outside [-90, 90]", dec)
	}
	return nil
}

// FormatRA writes an RA in degrees as hours, minutes and seconds with two decimals: 05h35m14.10s.
func FormatRA(raDeg float64) string {
	cs := int64(math.Round(raDeg / 15 * 3600 * 100)) // hundredths of a second of time
	cs %= 24 * 3600 * 100
	h := cs / (3600 * 100)
	m := cs / (60 * 100) % 60
	s := float64(cs%(60*100)) / 100
	return fmt.Sprintf("%02dh%02dm%05.2fs", h, m, s)
}

// FormatDec writes a declination in degrees with one decimal on the arcseconds: -05d22m30.0s.
func FormatDec(decDeg float64) string {
	sign := "+"
	if decDeg < 0 {
		sign = "-"
	}
	ds := int64(math.Round(math.Abs(decDeg) * 3600 * 10)) // tenths of an arcsecond
	d := ds / (3600 * 10)
	m := ds / (60 * 10) % 60
	s := float64(ds%(60*10)) / 10
	return fmt.Sprintf("%s%02dd%02dm%04.1fs", sign, d, m, s)
}
