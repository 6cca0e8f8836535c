package config

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// EnvFromSecrets gives Compile what the receiver's environment would: the referenced
// keys, not the expired signing secret's, not the Secret of a variable given otherwise;
// and a failed lookup names the spec field.
func TestEnvFromSecrets(t *testing.T) {
	we := validEndpoint(t)
	secrets := map[string]string{
		"stripe-webhook/current": "whsec_Y3VycmVudA==",
		"shop-db-app/uri":        "postgres://in-cluster/app",
	}
	var read []string
	lookup := func(name, key string) (string, error) {
		read = append(read, name+"/"+key)
		v, ok := secrets[name+"/"+key]
		if !ok {
			return "", errors.New("Secret " + name + " key " + key + " not found")
		}
		return v, nil
	}
	getenv, err := EnvFromSecrets(we, lookup, map[string]string{EnvDatabaseURL: "postgres://127.0.0.1:5432/app"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"stripe-webhook/current"}; !reflect.DeepEqual(read, want) {
		t.Errorf("read %v, want %v (the database URL was given, the previous secret expired)", read, want)
	}
	fromSecrets, err := Compile(we, getenv)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{EnvDatabaseURL: "postgres://127.0.0.1:5432/app", EnvSigningSecretPrefix + "0": "whsec_Y3VycmVudA=="}
	fromEnv, err := Compile(we, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if fromSecrets.DatabaseURL != fromEnv.DatabaseURL || fromSecrets.Key() != fromEnv.Key() || fromSecrets.SinkURL != fromEnv.SinkURL {
		t.Errorf("from Secrets %+v, from the environment %+v", fromSecrets, fromEnv)
	}

	delete(secrets, "stripe-webhook/current")
	_, err = EnvFromSecrets(we, lookup, nil, time.Now())
	if want := "spec.signingSecrets[0].secretKeyRef: Secret stripe-webhook key current not found"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}
