package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
)

// localNATS is where devrun runs its own NATS server (bin/nats-server, state
// in data/nats) when NATS_URL is unset: not 4222, where an older server a
// system package started may listen.
const localNATS = "127.0.0.1:4223"

// ingestURL returns the NATS server the worker's ingress should consume
// from, or "" to run without it (INGEST_ENABLED=false): NATS_URL if set,
// else the local server, which start says devrun starts unless one listens
// there already.
func ingestURL(getenv func(string) string, listening func(string) bool) (url string, start bool, err error) {
	if v := getenv("INGEST_ENABLED"); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return "", false, fmt.Errorf("INGEST_ENABLED=%q: want true or false", v)
		}
		if !on {
			return "", false, nil
		}
	}
	if url := getenv("NATS_URL"); url != "" {
		return url, false, nil
	}
	return "nats://" + localNATS, !listening(localNATS), nil
}

// startNATS starts bin/nats-server with JetStream on localNATS, its state in
// data/nats, which a second `make run` reuses.
func startNATS() (*exec.Cmd, error) {
	bin, err := natsserver.Binary()
	if err != nil {
		return nil, err
	}
	args, err := natsserver.Args(localNATS, filepath.Join(dataDir, "nats"))
	if err != nil {
		return nil, err
	}
	fmt.Printf("starting the NATS server (%s) on %s, state in %s/nats\n", bin, localNATS, dataDir)
	return startListening("nats", "the NATS server", localNATS, 15*time.Second, bin, args...)
}

// The demo's customer and keys are fixed, so a second `make run` shows
// every event as a duplicate; each run's poison message is new.
const (
	ingestCustomer = "demo-dave"
	ingestKey      = "dave-order-1"
)

// playIngestDemo publishes a point event to JetStream, a producer's retry of
// it (another Nats-Msg-Id, as after JetStream's duplicate window) and a
// poison message, all for one customer, then prints what the ingress did:
// the entity's status (the event counted once) and the dead letter with its
// reason. It connects as the worker's ingress does, with sec.
func playIngestDemo(ctx context.Context, url string, sec ingress.Security, rc *rewardsclient.Client, out io.Writer) error {
	fmt.Fprintf(out, "\nbus ingress (NATS JetStream at %s; %s):\n", url, sec)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nc, err := ingress.Connect(ctx, url, "entityflow make run demo", sec, logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	dead, err := waitForStream(ctx, js, ingress.DefaultDeadLetterStream)
	if err != nil {
		return err
	}
	if _, err := waitForStream(ctx, js, ingress.DefaultPointsStream); err != nil {
		return err
	}
	subject := ingress.PointsSubject(ingress.DefaultPointsPrefix, "default", ingestCustomer)
	poisonID := fmt.Sprintf("dave-poison-%d", time.Now().UnixNano())
	for _, m := range []struct{ body, msgID, note string }{
		{`{"dedup_key":"` + ingestKey + `","activity":"purchase","points":40,"source_id":"order-1"}`, ingestKey, "a point event"},
		{`{"dedup_key":"` + ingestKey + `","activity":"purchase","points":40,"source_id":"order-1"}`, ingestKey + "-retry", "the producer's retry, another Nats-Msg-Id"},
		{`{"dedup_key":"dave-zero","points":0}`, poisonID, "a poison message: zero points"},
	} {
		msg := nats.NewMsg(subject)
		msg.Data = []byte(m.body)
		msg.Header.Set(nats.MsgIdHdr, m.msgID)
		ack, err := js.PublishMsg(ctx, msg)
		if err != nil {
			return fmt.Errorf("publishing on %s: %w", subject, err)
		}
		stored := "stored"
		if ack.Duplicate {
			stored = "dropped by JetStream as a duplicate (its 2-minute window)"
		}
		fmt.Fprintf(out, "  published %s %s  (%s; %s)\n", subject, m.body, m.note, stored)
	}
	// The ingress applies a customer's messages in stream order: once the
	// poison message is dead-lettered, the events before it were handled.
	deadSubject := ingress.DefaultDeadLetterPrefix + "." + subject
	var letter *jetstream.RawStreamMsg
	for letter == nil {
		m, err := dead.GetLastMsgForSubject(ctx, deadSubject)
		switch {
		case err == nil && m.Header.Get("Ingest-Original-Msg-Id") == poisonID:
			letter = m
		case err != nil && !errors.Is(err, jetstream.ErrMsgNotFound):
			return fmt.Errorf("reading the dead letters: %w", err)
		}
		if letter == nil {
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for the dead letter of %s (see data/worker.log): %w", poisonID, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	st, err := rc.Status(ctx, ingestCustomer)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  %s: %d points, %d events  (the retry counted once)\n", ingestCustomer, st.Points, st.EventCount)
	fmt.Fprintf(out, "  dead letter on %s: %s\n", deadSubject, letter.Header.Get(ingress.HeaderError))
	fmt.Fprintf(out, "  (its headers: %s; read them with: nats stream view %s)\n", headerNames(letter.Header), ingress.DefaultDeadLetterStream)
	return nil
}

// waitForStream returns the stream name once the worker's ingress has
// created it.
func waitForStream(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	for {
		s, err := js.Stream(ctx, name)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("stream %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the worker's ingress to create stream %s (see data/worker.log): %w", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// headerNames lists the Ingest-* headers of a dead letter.
func headerNames(h nats.Header) string {
	var names []string
	for k := range h {
		if strings.HasPrefix(k, "Ingest-") {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
