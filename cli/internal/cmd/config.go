package cmd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"gopkg.in/yaml.v3"
)

// Config is $XDG_CONFIG_HOME/obsops/config.yaml: named contexts (one per obsops site: the main
// site, an observatory) and which one is current. It holds credentials, so it is written with
// mode 0600 in a directory of mode 0700.
type Config struct {
	CurrentContext string              `yaml:"current-context"`
	Contexts       map[string]*Context `yaml:"contexts"`
}

// Context is one obsops site and the credential used there.
type Context struct {
	URL string `yaml:"url"`
	// Token is a session JWT (from obsops login) or an API token (obsops login --token).
	Token     string `yaml:"token,omitempty"`
	TokenKind string `yaml:"token-kind,omitempty"` // jwt or api_token
	ExpiresAt string `yaml:"expires-at,omitempty"` // of a session JWT, RFC 3339
	Username  string `yaml:"username,omitempty"`
}

// configPath is where the configuration lives: $XDG_CONFIG_HOME/obsops/config.yaml, else
// ~/.config/obsops/config.yaml.
func configPath() (string, error) {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "obsops", "config.yaml"), nil
}

// loadConfig reads the configuration; a missing file is an empty configuration.
func loadConfig(path string) (*Config, error) {
	cfg := &Config{Contexts: map[string]*Context{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(b, cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if cfg.Contexts == nil {
		cfg.Contexts = map[string]*Context{}
	}
	return cfg, nil
}

// save writes the configuration atomically with mode 0600.
func (c *Config) save(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// names lists the contexts, sorted.
func (c *Config) names() []string {
	var out []string
	for n := range c.Contexts {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
