// Command cluster runs a real Temporal server on PostgreSQL (internal/testkit/cluster)
// for `make run-cluster`: it sets up the databases, starts temporal-server
// (one process of every service, or with -topology split frontend,
// matching, two history hosts and the internal worker as processes of their
// own), registers the namespace and the search attributes, then runs the
// command given after "--" with TEMPORAL_ADDRESS pointing at the server, and
// stops the server when that command ends; without a command it serves until
// Ctrl-C.
//
//	cluster [-dir data/cluster] [-topology one|split] [-shards N] [-port 7633] [-postgres 127.0.0.1:5432] [-fairness=true] [-- command args...]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/entityflow/entityflow/internal/testkit/cluster"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	var o cluster.Options
	fs.StringVar(&o.Dir, "dir", "data/cluster", "folder for the server's configuration and log")
	topology := fs.String("topology", string(cluster.TopologyOne), "one: every service in one temporal-server process; split: frontend, matching, two history hosts and the internal worker, each a process of its own (databases temporal_split and temporal_split_visibility unless -database says otherwise)")
	fs.IntVar(&o.HistoryShards, "shards", 0, "history shards, fixed for a database's life (default 4 for -topology one, 16 for split)")
	fs.StringVar(&o.Database, "database", "", "the server's database (default temporal, or temporal_split for -topology split); its visibility database is the same name with _visibility")
	fs.IntVar(&o.Port, "port", 7633, "the frontend's gRPC port (the other services use the next ones)")
	fs.StringVar(&o.Postgres, "postgres", "127.0.0.1:5432", "PostgreSQL host:port")
	fs.StringVar(&o.User, "user", "postgres", "PostgreSQL user")
	fs.StringVar(&o.Namespace, "namespace", "default", "namespace to register")
	fairness := fs.Bool("fairness", true, "turn on task-queue fairness (dynamic config matching.enableFairness): each tenant's fairness key gets its share of a queue")
	if err := fs.Parse(args); err != nil {
		return err
	}
	t, err := cluster.ParseTopology(*topology)
	if err != nil {
		return fmt.Errorf("-topology: %w", err)
	}
	o.Topology = t
	if o.HistoryShards < 0 {
		return fmt.Errorf("-shards %d: want a positive count", o.HistoryShards)
	}
	if o.Database != "" {
		o.VisibilityDatabase = o.Database + "_visibility"
	}
	if *fairness {
		o.DynamicConfig = cluster.Fairness()
	}
	o.Log = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	srv, err := cluster.Start(ctx, o)
	if err != nil {
		return err
	}
	defer func() { _ = srv.Stop() }()
	fmt.Fprintf(os.Stderr, "Temporal server on PostgreSQL ready at %s (namespace %s, topology %s, processes %v, logs in %s)\n", srv.Address, srv.Namespace, o.Topology, srv.Services(), o.Dir)
	if fs.NArg() == 0 {
		select {
		case <-ctx.Done():
			return nil
		case <-serverExit(srv):
			return fmt.Errorf("the server ended: %w", srv.Wait())
		}
	}
	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+srv.Address, "TEMPORAL_NAMESPACE="+srv.Namespace)
	if err := cmd.Start(); err != nil {
		return err
	}
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-finished:
			return
		case <-ctx.Done():
		case <-serverExit(srv):
			fmt.Fprintf(os.Stderr, "cluster: the server ended (%v); stopping %s\n", srv.Wait(), fs.Arg(0))
		}
		_ = cmd.Process.Signal(os.Interrupt)
	}()
	err = cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) && ctx.Err() != nil {
		return nil
	}
	return err
}

// serverExit closes when the server has ended (one of its processes exited).
func serverExit(srv *cluster.Server) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		_ = srv.Wait()
		close(done)
	}()
	return done
}
