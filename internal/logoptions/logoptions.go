// Package logoptions is the logging configuration of gpudra's servers: that of
// k8s.io/component-base/logs, with the flags kube-scheduler has (-v, --vmodule,
// --logging-format=text|json, --log-flush-frequency, ...).
package logoptions

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"
	// The JSON format, beside the text format built in.
	_ "k8s.io/component-base/logs/json/register"
)

// Formats are the values --logging-format accepts.
var Formats = []string{logsapi.DefaultLogFormat, logsapi.JSONLogFormat}

// New is the default logging configuration: text, verbosity 0.
func New() *logsapi.LoggingConfiguration { return logsapi.NewLoggingConfiguration() }

// AddFlags binds c to the logging flags in fs.
func AddFlags(c *logsapi.LoggingConfiguration, fs *pflag.FlagSet) { logsapi.AddFlags(c, fs) }

// ValidateFormat refuses a --logging-format other than Formats, naming them.
func ValidateFormat(format string) error {
	if !slices.Contains(Formats, format) {
		return fmt.Errorf("--logging-format=%q: accepted values are %s", format, strings.Join(Formats, ", "))
	}
	return nil
}

// Validate refuses a configuration the logging flags cannot give, naming the flag and
// what it accepts.
func Validate(c *logsapi.LoggingConfiguration) error {
	if err := ValidateFormat(c.Format); err != nil {
		return err
	}
	if err := logsapi.Validate(c, nil, nil).ToAggregate(); err != nil {
		return fmt.Errorf("logging flags: %w", err)
	}
	return nil
}

// ValidateAndApply validates c and makes it the process's logging configuration (klog's
// logger, verbosity and flushing), once per process.
func ValidateAndApply(c *logsapi.LoggingConfiguration) error {
	if err := Validate(c); err != nil {
		return err
	}
	return logsapi.ValidateAndApply(c, nil)
}
