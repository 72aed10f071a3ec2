// Command kafkatoxic is toxiproxy-server with one more toxic type, `kafka`, which follows
// Kafka's request framing on the client -> broker stream and holds, duplicates or cuts off
// the responses of chosen requests (see toxic.go).
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/Shopify/toxiproxy/v2"
)

const toxiproxyModule = "github.com/Shopify/toxiproxy/v2"

func main() {
	host := flag.String("host", "127.0.0.1", "host for the API to listen on")
	port := flag.String("port", "8474", "port for the API to listen on")
	eventsPath := flag.String("events", "", "append one JSON line per kafka toxic event to this file")
	version := flag.Bool("version", false, "print the version")
	flag.Parse()

	setVersion()
	if *version {
		fmt.Printf("toxiproxy-server version %s (onceproof kafka toxic)\n", toxiproxy.Version)
		return
	}

	logger := newLogger()
	if *eventsPath != "" {
		f, err := os.OpenFile(*eventsPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			fmt.Fprintf(os.Stderr, "error: %v\n", err)
			os.Exit(1)
		}
		defer f.Close()
		events = &eventLog{w: f}
	}

	logger.Info().Str("version", toxiproxy.Version).Msg("Starting Toxiproxy with the kafka toxic")
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), logger)
	go func() {
		if err := server.Listen(net.JoinHostPort(*host, *port)); err != nil {
			server.Logger.Err(err).Msg("Server finished with error")
		}
	}()

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	<-signals
	server.Logger.Info().Msg("Shutdown started")
	if err := server.Shutdown(); err != nil {
		logger.Err(err).Msg("Shutdown finished with error")
	}
}

// setVersion reports the toxiproxy release we are built on, as its release binaries do
// ("2.12.0"), unless -ldflags already set it: upstream's default is "git".
func setVersion() {
	if toxiproxy.Version != "git" {
		return
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == toxiproxyModule {
				toxiproxy.Version = strings.TrimPrefix(dep.Version, "v")
			}
		}
	}
}

// newLogger logs JSON to stdout like upstream, honouring LOG_LEVEL.
func newLogger() zerolog.Logger {
	zerolog.TimestampFunc = func() time.Time { return time.Now().UTC() }
	logger := zerolog.New(os.Stdout).With().Timestamp().Logger()
	if val, ok := os.LookupEnv("LOG_LEVEL"); ok {
		if lvl, err := zerolog.ParseLevel(val); err == nil {
			logger = logger.Level(lvl)
		} else {
			logger.Err(err).Msgf("unknown LOG_LEVEL value: %q", val)
		}
	}
	return logger
}
