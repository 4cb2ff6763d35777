package dlock

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// crc16 is Redis Cluster's key hash (CRC-16/XMODEM).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// Slot returns the Redis Cluster slot of key (hash tags respected).
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

// checkSlots refuses a multi-key request across slots on a Cluster before
// it is sent (the server would answer CROSSSLOT).
func (c *Client) checkSlots(keys []string) error {
	if _, ok := c.rdb.(*redis.ClusterClient); !ok {
		return nil
	}
	first := Slot(keys[0])
	for _, k := range keys[1:] {
		if Slot(k) != first {
			return fmt.Errorf("%w: %q and %q (use a hash tag)", ErrCrossSlot, keys[0], k)
		}
	}
	return nil
}
