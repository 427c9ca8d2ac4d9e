// Command gendashboards writes entityflow's Grafana dashboards, built in
// Go by package grafana, as JSON into a folder (`make dashboards`: into
// deploy/grafana/dashboards, the files operators import), removing the JSON
// files there that no dashboard writes any more.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/entityflow/entityflow/deploy/grafana"
)

func main() {
	out := flag.String("out", "dashboards", "the `folder` the dashboards' JSON files are written to")
	flag.Parse()
	if err := grafana.Write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gendashboards:", err)
		os.Exit(1)
	}
}
