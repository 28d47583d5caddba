package cmd

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Output formats of every read: table (aligned columns, for people), json (the API's answer,
// indented), csv (a header and the same columns as the table).
const (
	outTable = "table"
	outJSON  = "json"
	outCSV   = "csv"
)

// view says how a command's answer is shown: rows is the JSON path of the list of rows ("" for
// the answer itself, "items" for a page), columns the JSON keys (a.b for nested) shown.
type view struct {
	rows    string
	columns []string
}

// render writes body (the API's JSON answer) in format.
func render(w io.Writer, format string, body []byte, v view) error {
	if format == outJSON {
		var buf bytes.Buffer
		if err := json.Indent(&buf, body, "", "  "); err != nil {
			_, err = w.Write(body)
			return err
		}
		buf.WriteByte('\n')
		_, err := w.Write(buf.Bytes())
		return err
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return fmt.Errorf("the answer is not JSON: %w", err)
	}
	rowsAny := doc
	if v.rows != "" {
		rowsAny = lookup(doc, v.rows)
	}
	var rows []any
	switch r := rowsAny.(type) {
	case []any:
		rows = r
	case nil:
	default:
		rows = []any{r}
	}
	cols := v.columns
	if len(cols) == 0 && len(rows) > 0 {
		if m, ok := rows[0].(map[string]any); ok {
			for k := range m {
				cols = append(cols, k)
			}
			sortStrings(cols)
		}
	}
	table := make([][]string, 0, len(rows))
	for _, r := range rows {
		line := make([]string, len(cols))
		for i, c := range cols {
			line[i] = cell(lookup(r, c))
		}
		table = append(table, line)
	}
	if format == outCSV {
		cw := csv.NewWriter(w)
		if err := cw.Write(cols); err != nil {
			return err
		}
		if err := cw.WriteAll(table); err != nil {
			return err
		}
		cw.Flush()
		return cw.Error()
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	upper := make([]string, len(cols))
	for i, c := range cols {
		upper[i] = strings.ToUpper(strings.ReplaceAll(c, ".", "_"))
	}
	fmt.Fprintln(tw, strings.Join(upper, "\t"))
	for _, line := range table {
		for i := range line {
			line[i] = strings.ReplaceAll(line[i], "\t", " ")
		}
		fmt.Fprintln(tw, strings.Join(line, "\t"))
	}
	return tw.Flush()
}

// lookup follows a dotted path of keys in decoded JSON.
func lookup(v any, path string) any {
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// cell is one value as text: lists joined with commas, objects as JSON, time stamps kept.
func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		if t, err := time.Parse(time.RFC3339Nano, x); err == nil && len(x) > 20 {
			return t.UTC().Format("2006-01-02T15:04:05Z")
		}
		return x
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = cell(e)
		}
		return strings.Join(parts, ",")
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
