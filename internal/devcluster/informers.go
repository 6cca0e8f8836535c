package devcluster

import (
	"context"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// startInformers starts factory's informers and waits until synced report synced. They
// run until stop is called, whatever ctx does, and stop waits for them to end. When ctx
// is done first the informers are already stopped and err is ctx's.
func startInformers(ctx context.Context, factory informers.SharedInformerFactory, synced ...cache.InformerSynced) (stop func(), err error) {
	informerCtx, cancel := context.WithCancel(context.Background())
	factory.Start(informerCtx.Done())
	stop = func() {
		cancel()
		factory.Shutdown()
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		stop()
		return nil, ctx.Err()
	}
	return stop, nil
}
