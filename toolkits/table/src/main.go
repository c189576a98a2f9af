// table: render JSON records as an aligned text table, a Markdown table or CSV.
package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

const usage = `usage: table <command> [options] < records.json
commands:
  text      aligned plain-text table (columns padded with spaces)
  markdown  GitHub-flavoured Markdown table
  csv       CSV (RFC 4180)
  keys      the column names found, one per line, with how many records have each
options:
  --columns=a,b,c   these columns, in this order (default: every key, first-seen order)
  --max-width=N     cut cells longer than N characters with "…" (text, markdown; default 60, 0 = no limit)
  --sort=COL        sort rows by COL (numbers numerically); --desc to reverse
input: a JSON array of objects, one JSON object per line (NDJSON), or an array of arrays (first row = header)`

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

type opts struct {
	columns  []string
	maxWidth int
	sortBy   string
	desc     bool
}

func parseOpts(args []string) (opts, error) {
	o := opts{maxWidth: 60}
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--columns="):
			for _, c := range strings.Split(strings.TrimPrefix(a, "--columns="), ",") {
				if c = strings.TrimSpace(c); c != "" {
					o.columns = append(o.columns, c)
				}
			}
		case strings.HasPrefix(a, "--max-width="):
			n, err := strconv.Atoi(strings.TrimPrefix(a, "--max-width="))
			if err != nil || n < 0 {
				return o, usageError{"--max-width needs a number >= 0"}
			}
			o.maxWidth = n
		case strings.HasPrefix(a, "--sort="):
			o.sortBy = strings.TrimPrefix(a, "--sort=")
		case a == "--desc":
			o.desc = true
		default:
			return o, usageError{fmt.Sprintf("unknown option %q", a)}
		}
	}
	return o, nil
}

// records reads the input into a header (first-seen key order) and rows of cells.
func records(data []byte) ([]string, []map[string]any, error) {
	trimmed := bytes.TrimSpace(data)
	var raw []json.RawMessage
	if len(trimmed) > 0 && trimmed[0] == '[' {
		if err := json.Unmarshal(trimmed, &raw); err != nil {
			return nil, nil, fmt.Errorf("invalid JSON: %v", err)
		}
	} else {
		sc := bufio.NewScanner(bytes.NewReader(trimmed))
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		line := 0
		for sc.Scan() {
			line++
			if t := bytes.TrimSpace(sc.Bytes()); len(t) > 0 {
				if !json.Valid(t) {
					return nil, nil, fmt.Errorf("line %d: invalid JSON", line)
				}
				raw = append(raw, append(json.RawMessage(nil), t...))
			}
		}
	}
	var keys []string
	seen := map[string]bool{}
	var rows []map[string]any
	for i, r := range raw {
		var arr []any
		if json.Unmarshal(r, &arr) == nil {
			if i == 0 {
				for _, h := range arr {
					keys = append(keys, cell(h))
				}
				continue
			}
			row := map[string]any{}
			for j, v := range arr {
				if j < len(keys) {
					row[keys[j]] = v
				}
			}
			rows = append(rows, row)
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.UseNumber()
		tok, err := dec.Token()
		if err != nil || tok != json.Delim('{') {
			return nil, nil, fmt.Errorf("record %d is not an object", i+1)
		}
		row := map[string]any{}
		for dec.More() {
			kt, _ := dec.Token()
			k := kt.(string)
			var v any
			if err := dec.Decode(&v); err != nil {
				return nil, nil, fmt.Errorf("record %d: %v", i+1, err)
			}
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
			row[k] = v
		}
		rows = append(rows, row)
	}
	return keys, rows, nil
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case json.Number:
		return x.String()
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

func clip(s string, n int) string {
	s = strings.NewReplacer("\r\n", " ", "\n", " ", "\t", " ").Replace(s)
	if n > 0 && utf8.RuneCountInString(s) > n {
		r := []rune(s)
		return string(r[:n-1]) + "…"
	}
	return s
}

func grid(keys []string, rows []map[string]any, o opts) ([]string, [][]string, error) {
	cols := keys
	if len(o.columns) > 0 {
		have := map[string]bool{}
		for _, k := range keys {
			have[k] = true
		}
		for _, c := range o.columns {
			if !have[c] {
				return nil, nil, usageError{fmt.Sprintf("no column %q; columns: %s", c, strings.Join(keys, ", "))}
			}
		}
		cols = o.columns
	}
	if o.sortBy != "" {
		found := false
		for _, k := range keys {
			found = found || k == o.sortBy
		}
		if !found {
			return nil, nil, usageError{fmt.Sprintf("no column %q to sort by; columns: %s", o.sortBy, strings.Join(keys, ", "))}
		}
		sort.SliceStable(rows, func(i, j int) bool {
			a, b := cell(rows[i][o.sortBy]), cell(rows[j][o.sortBy])
			fa, ea := strconv.ParseFloat(a, 64)
			fb, eb := strconv.ParseFloat(b, 64)
			less := a < b
			if ea == nil && eb == nil {
				less = fa < fb
			}
			if o.desc {
				return !less && a != b
			}
			return less
		})
	}
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = make([]string, len(cols))
		for j, c := range cols {
			out[i][j] = cell(r[c])
		}
	}
	return cols, out, nil
}

func render(cmd string, cols []string, cells [][]string, o opts, w io.Writer) error {
	switch cmd {
	case "csv":
		cw := csv.NewWriter(w)
		cw.Write(cols)
		cw.WriteAll(cells)
		return cw.Error()
	case "markdown":
		esc := func(s string) string { return strings.ReplaceAll(clip(s, o.maxWidth), "|", `\|`) }
		hdr := make([]string, len(cols))
		sep := make([]string, len(cols))
		for i, c := range cols {
			hdr[i], sep[i] = esc(c), "---"
		}
		fmt.Fprintf(w, "| %s |\n| %s |\n", strings.Join(hdr, " | "), strings.Join(sep, " | "))
		for _, r := range cells {
			row := make([]string, len(r))
			for i, v := range r {
				row[i] = esc(v)
			}
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		}
	case "text":
		width := make([]int, len(cols))
		all := append([][]string{cols}, cells...)
		for _, r := range all {
			for i, v := range r {
				r[i] = clip(v, o.maxWidth)
				if n := utf8.RuneCountInString(r[i]); n > width[i] {
					width[i] = n
				}
			}
		}
		for k, r := range all {
			var b strings.Builder
			for i, v := range r {
				if i > 0 {
					b.WriteString("  ")
				}
				b.WriteString(v)
				if i < len(r)-1 {
					b.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(v)))
				}
			}
			fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
			if k == 0 {
				parts := make([]string, len(width))
				for i, n := range width {
					parts[i] = strings.Repeat("-", n)
				}
				fmt.Fprintln(w, strings.Join(parts, "  "))
			}
		}
	}
	return nil
}

func run(args []string, in io.Reader, out io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "--help" || args[0] == "-h" {
		fmt.Fprintln(out, usage)
		if len(args) == 0 {
			return usageError{"a command is required"}
		}
		return nil
	}
	cmd := args[0]
	switch cmd {
	case "text", "markdown", "csv", "keys":
	default:
		return usageError{fmt.Sprintf("unknown command %q; commands: text, markdown, csv, keys", cmd)}
	}
	o, err := parseOpts(args[1:])
	if err != nil {
		return err
	}
	data, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	keys, rows, err := records(data)
	if err != nil {
		return err
	}
	if cmd == "keys" {
		for _, k := range keys {
			n := 0
			for _, r := range rows {
				if _, ok := r[k]; ok {
					n++
				}
			}
			fmt.Fprintf(out, "%s\t%d\n", k, n)
		}
		return nil
	}
	cols, cells, err := grid(keys, rows, o)
	if err != nil {
		return err
	}
	return render(cmd, cols, cells, o, out)
}

func main() {
	w := bufio.NewWriter(os.Stdout)
	err := run(os.Args[1:], os.Stdin, w)
	w.Flush()
	if err != nil {
		fmt.Fprintln(os.Stderr, "table:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
