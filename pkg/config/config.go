// Package config loads a service's settings from OPS_* environment variables.
//
// Every setting has one variable; a secret may instead be given as NAME_FILE, the path of a file
// holding the value (Kubernetes secrets, Docker secrets). Errors are one line naming the variable,
// so a misconfigured deployment says exactly what to fix.
package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

// Invalid reports a setting whose value is not acceptable.
type Invalid struct {
	Var    string // the environment variable, e.g. OPS_SITE_TYPE
	Reason string // what is wrong with the value, e.g. must be one of main, secondary
}

// Error is the one line an operator sees: the variable, then the reason.
func (e *Invalid) Error() string { return e.Var + ": " + e.Reason }

// Validator is implemented by configuration structs with rules beyond types and defaults.
type Validator interface {
	Validate() error
}

// Load fills cfg, a pointer to a struct with `env` and `envDefault` tags, from the environment,
// then runs its Validate method (if any, on it and on embedded structs). The first error is
// returned as one line naming the variable.
func Load(cfg any) error {
	environment, err := environmentWithFiles()
	if err != nil {
		return err
	}
	if err := env.ParseWithOptions(cfg, env.Options{Environment: environment}); err != nil {
		return oneLine(cfg, err, environment)
	}
	return validate(reflect.ValueOf(cfg))
}

// environmentWithFiles is the process environment plus OPS_X read from the file named by
// OPS_X_FILE, unless OPS_X itself is set. The process environment is not modified.
func environmentWithFiles() (map[string]string, error) {
	environment := map[string]string{}
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		environment[name] = value
	}
	for name, path := range environment {
		if !strings.HasPrefix(name, "OPS_") || !strings.HasSuffix(name, "_FILE") || path == "" {
			continue
		}
		target := strings.TrimSuffix(name, "_FILE")
		if _, set := os.LookupEnv(target); set {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, &Invalid{Var: name, Reason: "cannot read file: " + err.Error()}
		}
		environment[target] = strings.TrimRight(string(b), "\r\n")
	}
	return environment, nil
}

func validate(v reflect.Value) error {
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil
	}
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if f.Anonymous || (f.Type.Kind() == reflect.Struct && f.IsExported()) {
			if err := validate(v.Field(i).Addr()); err != nil {
				return err
			}
		}
	}
	if val, ok := v.Addr().Interface().(Validator); ok {
		return val.Validate()
	}
	return nil
}

// oneLine turns the library's aggregate error into the first problem, named by its variable.
func oneLine(cfg any, err error, environment map[string]string) error {
	var agg env.AggregateError
	if errors.As(err, &agg) && len(agg.Errors) > 0 {
		err = agg.Errors[0]
	}
	var pe env.ParseError
	if errors.As(err, &pe) {
		name := varOfField(reflect.TypeOf(cfg), pe.Name)
		if name == "" {
			name = pe.Name
		}
		return &Invalid{Var: name, Reason: fmt.Sprintf("invalid value %q: expected %s", environment[name], kindName(pe.Type))}
	}
	var unset env.VarIsNotSetError
	if errors.As(err, &unset) {
		return &Invalid{Var: unset.Key, Reason: "required but not set"}
	}
	var empty env.EmptyVarError
	if errors.As(err, &empty) {
		return &Invalid{Var: empty.Key, Reason: "must not be empty"}
	}
	return err
}

// varOfField finds the environment variable of a struct field, searching embedded structs; ""
// when there is none.
func varOfField(t reflect.Type, field string) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Name == field {
			name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
			return name
		}
		if f.Type.Kind() == reflect.Struct {
			if name := varOfField(f.Type, field); name != "" {
				return name
			}
		}
	}
	return ""
}

func kindName(t reflect.Type) string {
	switch {
	case t == reflect.TypeOf(time.Duration(0)):
		return "a duration such as 5s or 1m30s"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "an integer"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "a number"
	default:
		return t.String()
	}
}

// OneOf returns an *Invalid unless value is one of allowed.
func OneOf(name, value string, allowed ...string) error {
	for _, a := range allowed {
		if value == a {
			return nil
		}
	}
	return &Invalid{Var: name, Reason: fmt.Sprintf("invalid value %q: must be one of %s", value, strings.Join(allowed, ", "))}
}
