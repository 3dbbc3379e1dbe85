# `a2 console`: its page (cli/console/*: HTML, CSS, JavaScript, the icon)
# embedded in the program as build/gen/console_assets.c, which goes into
# the cli archive beside cli/console*.c.

CONSOLE_ASSETS := $(sort $(wildcard cli/console/*))
GEN_CONSOLE := $(B)/obj/gen/console_assets.o

build/gen/console_assets.c: $(CONSOLE_ASSETS) deploy/embed-assets
	@mkdir -p $(dir $@)
	deploy/embed-assets a2__console_assets $(CONSOLE_ASSETS) > $@.tmp && mv $@.tmp $@

$(GEN_CONSOLE): build/gen/console_assets.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(B)/lib/liba2cli_int.a: $(GEN_CONSOLE)
