// Command installer is the install command of the edge agents the node
// management suite runs in containers (images FROM scratch have no
// shell): it does what the suite's install script does for agents run as
// processes. Called as `installer <dir name> <dir path> <version>` with
// PF_NODE set, it waits while <control>/hang-<node>-<version> exists,
// records "<dir name> <version>" in <control>/installed-<node>, and fails
// when <control>/fail-<node>-<version> exists. <control> is /control.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

const control = "/control"

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: installer <dir name> <dir path> <version>")
		os.Exit(2)
	}
	dir, version, node := os.Args[1], os.Args[3], os.Getenv("PF_NODE")
	for {
		if _, err := os.Stat(filepath.Join(control, "hang-"+node+"-"+version)); err != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	f, err := os.OpenFile(filepath.Join(control, "installed-"+node), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintf(f, "%s %s\n", dir, version)
	f.Close()
	if _, err := os.Stat(filepath.Join(control, "fail-"+node+"-"+version)); err == nil {
		fmt.Fprintf(os.Stderr, "cannot install %s\n", version)
		os.Exit(3)
	}
}
