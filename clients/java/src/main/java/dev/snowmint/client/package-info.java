/**
 * The Java client of snowmint, a service that mints unique, roughly time-sorted 64-bit IDs.
 *
 * <p>{@link dev.snowmint.client.SnowmintClient} gets IDs (failover across endpoints, an
 * optional prefetch buffer); {@link dev.snowmint.client.Layout} decodes them, and other
 * systems' IDs, without a server.
 */
package dev.snowmint.client;
