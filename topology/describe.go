package topology

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Describe writes the topology as an aligned table, one topic per line:
// name on the cluster, partitions, key, value schema, cleanup, retention,
// writers and readers. It needs no cluster.
func Describe(w io.Writer, topics []Topic, o Options) error {
	if err := o.validate(topics); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tKEY\tVALUE SCHEMA\tCLEANUP\tRETENTION\tWRITERS\tREADERS")
	for _, t := range topics {
		schema := t.ValueSchema
		if schema == "" {
			schema = "(raw bytes)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n",
			o.Name(t), o.PartitionsOf(t), t.Key, schema, t.Cleanup,
			formatRetention(t.RetentionMs()),
			strings.Join(t.Writers, ","), strings.Join(t.Readers, ","))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("topology: write description: %w", err)
	}
	return nil
}

// formatRetention renders retention.ms for people: "unlimited", "7d",
// "12h", or a Go duration.
func formatRetention(ms int64) string {
	if ms < 0 {
		return "unlimited"
	}
	d := time.Duration(ms) * time.Millisecond
	day := 24 * time.Hour
	switch {
	case d >= day && d%day == 0:
		return strconv.FormatInt(int64(d/day), 10) + "d"
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	default:
		return d.String()
	}
}
