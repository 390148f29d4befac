// A shared library without kvrl's entry point, to test the missing-symbol error.
extern "C" int kvrl_not_an_entry_point() { return 0; }
