package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"
)

// The output formats of the read commands' -o flag.
const (
	outputJSON  = "json"
	outputYAML  = "yaml"
	outputTable = "table"
)

// outputFlag is the -o (--output) flag of a read command.
type outputFlag struct {
	format string
	// asJSON is the older --json of the commands that had it: -o json.
	asJSON *bool
}

// registerOutputFlag adds -o and --output to fs with the command's default
// format: table where the command printed a table, json where it printed
// the API's answer.
func registerOutputFlag(fs *flag.FlagSet, def string) *outputFlag {
	o := &outputFlag{format: def}
	usage := fmt.Sprintf("output format: json, yaml or table (default %s)", def)
	fs.StringVar(&o.format, "o", def, usage)
	fs.StringVar(&o.format, "output", def, "the same as -o")
	return o
}

// withJSONFlag adds the older --json, the same as -o json.
func (o *outputFlag) withJSONFlag(fs *flag.FlagSet) *outputFlag {
	o.asJSON = fs.Bool("json", false, "the same as -o json")
	return o
}

// check answers the chosen format, or a usage error naming the formats.
func (o *outputFlag) check() (string, error) {
	f := strings.ToLower(strings.TrimSpace(o.format))
	if o.asJSON != nil && *o.asJSON {
		if f != outputJSON && o.format != "" && f != outputTable {
			return "", usageErrorf("--json and -o %s disagree; give one of them", o.format)
		}
		return outputJSON, nil
	}
	switch f {
	case outputJSON, outputYAML, outputTable:
		return f, nil
	}
	return "", usageErrorf("-o %q is not an output format; use -o json, -o yaml or -o table", o.format)
}

// printOutput writes the API's JSON answer data in format: indented JSON,
// YAML (the same fields in the same order), or a table drawn by table
// (nil: the generic table of printTable).
func printOutput(w io.Writer, format string, data []byte, table func(io.Writer, []byte) error) error {
	switch format {
	case outputYAML:
		y, err := jsonToYAML(data)
		if err != nil {
			return fmt.Errorf("the North API's answer is not JSON: %w", err)
		}
		_, err = w.Write(y)
		return err
	case outputTable:
		if table == nil {
			table = printTable
		}
		return table(w, data)
	default:
		var buf bytes.Buffer
		if err := json.Indent(&buf, bytes.TrimSpace(data), "", "  "); err != nil {
			buf.Reset()
			buf.Write(bytes.TrimSpace(data))
		}
		buf.WriteByte('\n')
		_, err := w.Write(buf.Bytes())
		return err
	}
}

// jsonToYAML turns one JSON document into YAML, keeping the order of the
// fields and the numbers as written.
func jsonToYAML(data []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := yamlNode(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one JSON value")
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func yamlNode(dec *json.Decoder) (*yaml.Node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch v := tok.(type) {
	case json.Delim:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if v == '{' {
			n = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		}
		for dec.More() {
			if n.Kind == yaml.MappingNode {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := k.(string)
				n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key})
			}
			child, err := yamlNode(dec)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, child)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		if len(n.Content) == 0 {
			n.Style = yaml.FlowStyle
		}
		return n, nil
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v}, nil
	case json.Number:
		tag := "!!int"
		if strings.ContainsAny(v.String(), ".eE") {
			tag = "!!float"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v.String()}, nil
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}, nil
	default: // null
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
	}
}

// field is one field of a JSON object, in the order of the document.
type field struct {
	name  string
	value json.RawMessage
}

// objectFields answers the fields of a JSON object in order, or false when
// raw is not an object.
func objectFields(raw []byte) ([]field, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var out []field
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		name, _ := k.(string)
		out = append(out, field{name: name, value: v})
	}
	return out, true
}

// arrayItems answers the items of a JSON array, or false.
func arrayItems(raw []byte) ([]json.RawMessage, bool) {
	var items []json.RawMessage
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '[' {
		return nil, false
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, false
	}
	return items, true
}

// cell is a value as a table shows it: strings bare, null as -, the rest
// as compact JSON.
func cell(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return "-"
		}
		return strings.ReplaceAll(s, "\n", " ")
	}
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return "-"
	}
	var buf bytes.Buffer
	if json.Compact(&buf, t) != nil {
		return string(t)
	}
	return buf.String()
}

// printTable draws any JSON answer as a table: an array of objects (or an
// object whose one list is such an array, its other fields above it) as
// one row per item; any other object as FIELD and VALUE.
func printTable(w io.Writer, data []byte) error {
	if items, ok := arrayItems(data); ok {
		return rowsTable(w, items)
	}
	fields, ok := objectFields(data)
	if !ok {
		_, err := fmt.Fprintln(w, cell(data))
		return err
	}
	list := -1
	for i, f := range fields {
		if items, ok := arrayItems(f.value); ok && allObjects(items) {
			if list >= 0 {
				list = -2 // more than one list: no row table
				break
			}
			list = i
		}
	}
	if list < 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "FIELD\tVALUE")
		for _, f := range fields {
			fmt.Fprintf(tw, "%s\t%s\n", f.name, cell(f.value))
		}
		return tw.Flush()
	}
	for i, f := range fields {
		if i != list {
			fmt.Fprintf(w, "%s: %s\n", f.name, cell(f.value))
		}
	}
	items, _ := arrayItems(fields[list].value)
	return rowsTable(w, items)
}

func allObjects(items []json.RawMessage) bool {
	for _, it := range items {
		if _, ok := objectFields(it); !ok {
			return false
		}
	}
	return len(items) > 0
}

// rowsTable draws items as rows: for objects, a column per field name (in
// the order they first appear), else one VALUE column.
func rowsTable(w io.Writer, items []json.RawMessage) error {
	if len(items) == 0 {
		_, err := fmt.Fprintln(w, "(none)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if !allObjects(items) {
		fmt.Fprintln(tw, "VALUE")
		for _, it := range items {
			fmt.Fprintln(tw, cell(it))
		}
		return tw.Flush()
	}
	var cols []string
	seen := map[string]bool{}
	rows := make([]map[string]json.RawMessage, len(items))
	for i, it := range items {
		fields, _ := objectFields(it)
		rows[i] = map[string]json.RawMessage{}
		for _, f := range fields {
			rows[i][f.name] = f.value
			if !seen[f.name] {
				seen[f.name] = true
				cols = append(cols, f.name)
			}
		}
	}
	head := make([]string, len(cols))
	for i, c := range cols {
		head[i] = strings.ToUpper(c)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rows {
		line := make([]string, len(cols))
		for i, c := range cols {
			line[i] = "-"
			if v, ok := r[c]; ok {
				line[i] = cell(v)
			}
		}
		fmt.Fprintln(tw, strings.Join(line, "\t"))
	}
	return tw.Flush()
}
